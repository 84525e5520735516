package decide

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
)

// Spans, with Config.Tracer set. Their attributes name the policy, the
// outcome as sluice_decisions_total counts it, the caller's key class and
// what decided; never the key, the identity, a header or the path, which
// may carry credentials.
const (
	spanDecision = "sluice.decision"
	spanStore    = "sluice.store"

	attrPolicy    = attribute.Key("sluice.policy")
	attrOutcome   = attribute.Key("sluice.outcome")
	attrClass     = attribute.Key("sluice.caller_class")
	attrDecidedBy = attribute.Key("sluice.decided_by")
	attrOp        = attribute.Key("sluice.store.operation")
)

// decideTraced is decide within a sluice.decision span.
func (c *Core) decideTraced(ctx context.Context, p *Compiled, s *Subject) Verdict {
	ctx, span := c.tracer.Start(ctx, spanDecision, trace.WithAttributes(attrPolicy.String(p.Name)))
	defer span.End()
	v := c.decide(ctx, p, s)
	if v.Outcome != None {
		span.SetAttributes(attrOutcome.String(v.Outcome.String()))
	}
	if v.Rules != nil {
		span.SetAttributes(attrClass.String(v.Rules.Class.String()))
	}
	if v.Act != Invalid && v.Act != FailClosed && v.Outcome != FailedOpen {
		span.SetAttributes(attrDecidedBy.String(v.Result.DecidedBy.String()))
	}
	if v.Err != nil {
		span.SetStatus(codes.Error, v.Err.Error())
	}
	return v
}

// checkTraced is checkStore within a sluice.store span.
func (c *Core) checkTraced(ctx context.Context, p *Compiled, req sluice.Request) (sluice.Result, error) {
	ctx, span := c.tracer.Start(ctx, spanStore, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrPolicy.String(p.Name), attrOp.String("check")))
	defer span.End()
	res, err := c.checkStore(ctx, p, req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrDecidedBy.String(res.DecidedBy.String()))
	}
	return res, err
}
