package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The exporter's client is our own rather than otlptracehttp's: that
// package's request type (go.opentelemetry.io/proto/otlp/collector/trace/v1)
// carries the collector's gRPC service and links gRPC, grpc-gateway and
// genproto into the binary (about 10.5 MB of a 55 MB daemon), for one
// message that is a repeated field of ResourceSpans. otlptrace itself
// turns the SDK's spans into those ResourceSpans; this client sends them
// as OTLP/HTTP's binary protobuf, which every collector accepts.

// The environment variables this client reads besides the endpoints, as
// the OpenTelemetry specification names them (the TRACES_ form first).
const (
	envHeaders           = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders     = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envTimeout           = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout     = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envCompression       = "OTEL_EXPORTER_OTLP_COMPRESSION"
	envTracesCompression = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
)

const (
	// defaultExportTimeout bounds one export, retries included, as the
	// specification's default OTEL_EXPORTER_OTLP_TIMEOUT.
	defaultExportTimeout = 10 * time.Second
	// maxExportAttempts bounds the tries of one batch on a retryable
	// answer (429, 502, 503, 504) or a failed connection.
	maxExportAttempts = 3
	// maxRetryWait caps a collector's Retry-After.
	maxRetryWait = 5 * time.Second
	// maxAnswer is what is read of a collector's answer.
	maxAnswer = 64 << 10
	// maxHeaders caps the headers taken from the environment.
	maxHeaders = 32
)

// otlpClient is an otlptrace.Client that posts ExportTraceServiceRequest
// messages to an OTLP/HTTP traces URL.
type otlpClient struct {
	url     string
	headers http.Header
	timeout time.Duration
	gzip    bool
	hc      *http.Client
}

var _ otlptrace.Client = (*otlpClient)(nil)

// newOTLPClient returns the client of the traces URL u, its headers,
// timeout and compression read from the environment as the
// specification says (the traces-specific variable first).
func newOTLPClient(u string, lookup func(string) (string, bool)) (*otlpClient, error) {
	c := &otlpClient{url: u, headers: http.Header{}, timeout: defaultExportTimeout,
		hc: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	get := func(specific, general string) (string, bool) {
		if v, ok := lookup(specific); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), true
		}
		if v, ok := lookup(general); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), true
		}
		return "", false
	}
	if v, ok := get(envTracesHeaders, envHeaders); ok {
		h, err := parseHeaders(v)
		if err != nil {
			return nil, err
		}
		c.headers = h
	}
	if v, ok := get(envTracesTimeout, envTimeout); ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 || ms > 600_000 {
			return nil, fmt.Errorf("%s %q: want milliseconds between 1 and 600000: %w", envTimeout, v, errdefs.ErrInvalidArgument)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	if v, ok := get(envTracesCompression, envCompression); ok {
		switch v {
		case "gzip":
			c.gzip = true
		case "none":
		default:
			return nil, fmt.Errorf("%s %q: want gzip or none: %w", envCompression, v, errdefs.ErrInvalidArgument)
		}
	}
	return c, nil
}

// parseHeaders reads the W3C-baggage-like list of the specification:
// key=value pairs separated by commas, values percent-encoded.
func parseHeaders(s string) (http.Header, error) {
	h := http.Header{}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return nil, fmt.Errorf("%s: an entry is not key=value: %w", envHeaders, errdefs.ErrInvalidArgument)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil || strings.ContainsAny(val, "\r\n") {
			return nil, fmt.Errorf("%s: the value of %q is not a percent-encoded header value: %w", envHeaders, k, errdefs.ErrInvalidArgument)
		}
		h.Add(k, val)
		if len(h) > maxHeaders {
			return nil, fmt.Errorf("%s: more than %d headers: %w", envHeaders, maxHeaders, errdefs.ErrInvalidArgument)
		}
	}
	return h, nil
}

// Start and Stop have nothing to open or close: each export is a
// request of its own (the transport keeps connections alive).
func (c *otlpClient) Start(context.Context) error { return nil }

func (c *otlpClient) Stop(context.Context) error {
	c.hc.CloseIdleConnections()
	return nil
}

// UploadTraces posts spans as one ExportTraceServiceRequest, retrying a
// retryable failure up to maxExportAttempts within the timeout.
func (c *otlpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := exportRequest(spans)
	if err != nil {
		return err
	}
	if c.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(body); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		body = b.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		retry, after, err := c.post(ctx, body)
		if err == nil || !retry || attempt == maxExportAttempts {
			return err
		}
		if after > 0 {
			wait = min(after, maxRetryWait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (then %v)", err, ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// post sends one request; retry says whether another try may succeed,
// after the collector's Retry-After if it gave one.
func (c *otlpClient) post(ctx context.Context, body []byte) (retry bool, after time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return false, 0, err
	}
	for k, vs := range c.headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		// The URL (never a header) names the collector; a failed
		// connection may succeed on another try.
		return ctx.Err() == nil, 0, fmt.Errorf("otlp export: %w", err)
	}
	defer res.Body.Close()
	// The answer (a google.rpc.Status) says no more than its status.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswer))
	if res.StatusCode/100 == 2 {
		return false, 0, nil
	}
	err = fmt.Errorf("otlp export: the collector answered %s", res.Status)
	switch res.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if s, e := strconv.Atoi(res.Header.Get("Retry-After")); e == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return true, after, err
	}
	return false, 0, err
}

// exportRequest encodes an ExportTraceServiceRequest: field 1, repeated
// ResourceSpans.
func exportRequest(spans []*tracepb.ResourceSpans) ([]byte, error) {
	var b []byte
	for _, rs := range spans {
		m, err := proto.Marshal(rs)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	if len(b) == 0 {
		return nil, errors.New("otlp export: nothing to encode")
	}
	return b, nil
}
