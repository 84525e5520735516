#!/bin/bash
# How the files of this folder were made (issue 26, the memory store's slot
# lock). BEFORE and AFTER are test binaries of package bench built at two
# commits (cd bench && go test -c -o FILE .): b1b5ecb (the spinning lock)
# and 8ae6d78 (the queue that parks). The peers come from AFTER; they do
# not change. Three rounds, before and after alternating, GOMAXPROCS 2 and
# 16 on the 2-core machine.
BEFORE=${BEFORE:?} AFTER=${AFTER:?} OUT=${OUT:-.}
B='BenchmarkMemory/w=(hot|zipf1M)$/c=(1|8|32|128)$/cost=1$/lib='
for round in 1 2 3; do
 for p in 2 16; do
  GOMAXPROCS=$p $BEFORE -test.run '^$' -test.bench "${B}sluice\$" -test.benchtime 1000000x -test.benchmem >> $OUT/before-p$p.txt 2>&1
  GOMAXPROCS=$p $AFTER -test.run '^$' -test.bench "${B}sluice\$" -test.benchtime 1000000x -test.benchmem >> $OUT/after-p$p.txt 2>&1
  GOMAXPROCS=$p $AFTER -test.run '^$' -test.bench "${B}(xrate|floor)\$" -test.benchtime 1000000x -test.benchmem >> $OUT/peers-p$p.txt 2>&1
 done
done
