module github.com/sluicehq/sluice/deploy

go 1.26.0
