// Package sendtest sends checks to a coalesce.Sender in tests and waits
// for their answers, as the resilient layer does without its worker.
package sendtest

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/coalesce"
)

// Answer is one answer of a sent check.
type Answer struct {
	Res sluice.Result
	Err error
}

// Answers is a coalesce.Answerer that hands each answer on; it must have
// room for the answers it is given (Answer must not block).
type Answers chan Answer

// Answer hands res and err on.
func (a Answers) Answer(res sluice.Result, err error) { a <- Answer{res, err} }

// ErrNotSent is Check's error when the store did not take the check.
var ErrNotSent = errors.New("sendtest: SendCheck did not take the check")

// Check sends req's check to sd and waits for its answer: ErrNotSent when
// sd does not take it.
func Check(ctx context.Context, sd coalesce.Sender, req sluice.Request) (sluice.Result, error) {
	a := make(Answers, 1)
	if _, ok := sd.SendCheck(ctx, req, a); !ok {
		return sluice.Result{}, ErrNotSent
	}
	got := <-a
	return got.Res, got.Err
}
