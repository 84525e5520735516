package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one thing wrong with a configuration file: where it is
// (file, line, the path of the field such as policies[0].anonymous[0].rate)
// and what is wrong with it, including what would be valid.
type FieldError struct {
	File  string
	Line  int // 0 when the field is absent from the file
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in the order of their lines.
// Load returns it (as an error) when the file is invalid.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find a single FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es *Errors) add(file string, line int, field, msg string) {
	*es = append(*es, &FieldError{File: file, Line: line, Field: field, Msg: msg})
}

func (es Errors) sorted() Errors {
	slices.SortStableFunc(es, func(a, b *FieldError) int { return cmp.Compare(a.Line, b.Line) })
	return es
}
