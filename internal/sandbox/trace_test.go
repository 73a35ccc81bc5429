package sandbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// TestCreateSpans: a create whose context carries a span is traced
// beneath it: sandbox.create with a pool claim (claimed: origin pool)
// or, for a template without a pool, the cold path's sandbox.rootfs and
// runtime.create; a
// failed create is an Error span with the error's code; a context
// without a span makes none.
func TestCreateSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "test")
	defer tp.Shutdown(context.Background())
	e := newEnv(t)
	m := e.manager(Config{PoolSize: map[string]int{"host": 1}, MaxConcurrent: 10})
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m, "host") == 1 })

	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	claimed, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	cold, err := m.Create(ctx, Spec{Template: "other"}) // no pool
	if err != nil {
		t.Fatal(err)
	}
	e.rt.SetCreateError(fmt.Errorf("injected: %w", errdefs.ErrUnavailable))
	if _, err := m.Create(ctx, Spec{Template: "other"}); err == nil {
		t.Fatal("create succeeded with the runtime failing")
	}
	e.rt.SetCreateError(nil)
	req.End()
	if _, err := m.Create(context.Background(), Spec{Template: "other"}); err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	var creates []tracetest.SpanStub
	children := map[string][]string{} // create's span ID -> its children's names
	for _, s := range spans {
		if s.Name == "sandbox.create" {
			if s.Parent.SpanID() != req.SpanContext().SpanID() {
				t.Errorf("sandbox.create is not a child of the request's span")
			}
			creates = append(creates, s)
		}
	}
	for _, s := range spans {
		children[s.Parent.SpanID().String()] = append(children[s.Parent.SpanID().String()], s.Name)
	}
	if len(creates) != 3 {
		t.Fatalf("%d sandbox.create spans, want 3 (the one without a span in its context makes none): %v", len(creates), spans)
	}
	attr := func(s tracetest.SpanStub, k attribute.Key) string {
		for _, kv := range s.Attributes {
			if kv.Key == k {
				return kv.Value.String()
			}
		}
		return ""
	}
	if c := creates[0]; attr(c, tracing.KeyOrigin) != "pool" || attr(c, tracing.KeySandbox) != claimed.ID ||
		fmt.Sprint(children[c.SpanContext.SpanID().String()]) != "[sandbox.pool_claim]" {
		t.Errorf("claimed create: attributes %v, children %v", c.Attributes, children[c.SpanContext.SpanID().String()])
	}
	for _, s := range spans {
		if s.Name == "sandbox.pool_claim" && s.Parent.SpanID() == creates[0].SpanContext.SpanID() && attr(s, tracing.KeyPoolResult) != "claimed" {
			t.Errorf("pool claim result %q", attr(s, tracing.KeyPoolResult))
		}
	}
	if c := creates[1]; attr(c, tracing.KeyOrigin) != "cold" || attr(c, tracing.KeySandbox) != cold.ID ||
		fmt.Sprint(children[c.SpanContext.SpanID().String()]) != "[sandbox.rootfs runtime.create]" {
		t.Errorf("cold create: attributes %v, children %v", c.Attributes, children[c.SpanContext.SpanID().String()])
	}
	if c := creates[2]; c.Status.Code != codes.Error || c.Status.Description != "unavailable" || attr(c, tracing.KeySandbox) != "" {
		t.Errorf("failed create: status %+v, attributes %v", c.Status, c.Attributes)
	}
}
