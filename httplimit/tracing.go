package httplimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
)

// Spans, with Options.Tracer set. Their attributes name the policy, the
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
func (l *Limiter) decideTraced(ctx context.Context, p *policy, s *subject) verdict {
	ctx, span := l.tracer.Start(ctx, spanDecision, trace.WithAttributes(attrPolicy.String(p.Name)))
	defer span.End()
	v := l.decide(ctx, p, s)
	switch {
	case v.outcome < numOutcomes:
		span.SetAttributes(attrOutcome.String(outcomeNames[v.outcome]))
	case v.act == actPass:
		span.SetAttributes(attrOutcome.String("allowlisted"))
	}
	if v.rs != nil {
		span.SetAttributes(attrClass.String(classNames[v.rs.class]))
	}
	if v.act != actInvalid && v.act != actFailClosed && v.outcome != outcomeFailedOpen {
		span.SetAttributes(attrDecidedBy.String(v.res.DecidedBy.String()))
	}
	if v.err != nil {
		span.SetStatus(codes.Error, v.err.Error())
	}
	return v
}

// checkTraced is checkStore within a sluice.store span.
func (l *Limiter) checkTraced(ctx context.Context, p *policy, req sluice.Request) (sluice.Result, error) {
	ctx, span := l.tracer.Start(ctx, spanStore, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrPolicy.String(p.Name), attrOp.String("check")))
	defer span.End()
	res, err := l.checkStore(ctx, p, req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrDecidedBy.String(res.DecidedBy.String()))
	}
	return res, err
}
