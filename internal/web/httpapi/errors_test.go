package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/instancelock"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/internal/web/requests"
	"github.com/fibe-dev/billing/internal/web/strictjson"
	"github.com/fibe-dev/billing/wallet"
)

// answered is what the API wrote for an error.
type answered struct {
	status             int
	code, detail       string
	retryAfter, bearer string
}

// answerOf is what writeError answers for err on a GET without a key.
func answerOf(t *testing.T, err error) answered {
	t.Helper()
	rec := httptest.NewRecorder()
	(&api{logger: quiet}).writeError(rec, httptest.NewRequest(http.MethodGet, "/v1/wallets", nil), err)
	var p Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Equal(t, rec.Code, p.Status, "the body's status is the answer's")
	return answered{status: rec.Code, code: p.Code, detail: p.Detail,
		retryAfter: rec.Header().Get("Retry-After"), bearer: rec.Header().Get("WWW-Authenticate")}
}

const (
	internalGET = "internal error; retry"
	notFound    = "no such resource"
	keyReused   = "this Idempotency-Key was used for a different request"
	misconfig   = "this SKU is misconfigured at the payment provider; nothing was charged"
)

// exportedErrors is every exported error of the service's packages (each
// Err* value and each *...Error type, named "package.Name") with the answer
// the API gives it: what statusOf answered before the domains declared
// their own, so a mapping lost or changed fails here. An error the API has
// no answer for is a 500 internal. TestEveryExportedErrorIsListed keeps the
// list whole.
var exportedErrors = []struct {
	name string
	err  error
	want answered
}{
	// The events' errors are the operator's (billing endpoints, billing
	// events); no API request reaches them.
	{"events.ErrUnknownType", events.ErrUnknownType, answered{status: 500, code: "internal", detail: internalGET}},
	{"events.ErrBadURL", events.ErrBadURL, answered{status: 500, code: "internal", detail: internalGET}},
	{"events.ErrEndpointNotFound", events.ErrEndpointNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"events.ErrEventNotFound", events.ErrEventNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"wallet.ErrInsufficientBalance", wallet.ErrInsufficientBalance, answered{status: 409, code: "insufficient_balance", detail: "the wallet's balance is too low"}},
	{"wallet.ErrIdempotencyKeyReused", wallet.ErrIdempotencyKeyReused, answered{status: 422, code: "idempotency_key_reused", detail: keyReused}},
	{"wallet.ErrInvalidAmount", wallet.ErrInvalidAmount, answered{status: 400, code: "invalid_amount", detail: "amounts must be positive integers"}},
	{"wallet.ErrOverflow", wallet.ErrOverflow, answered{status: 400, code: "invalid_amount", detail: "amount too large"}},
	{"wallet.ErrInvalidKey", wallet.ErrInvalidKey, answered{status: 500, code: "internal", detail: internalGET}},
	{"wallet.ErrUnknownCurrency", wallet.ErrUnknownCurrency, answered{status: 404, code: "not_found", detail: notFound}},
	{"wallet.ErrInvalidPost", wallet.ErrInvalidPost, answered{status: 500, code: "internal", detail: internalGET}},
	{"wallet.ErrUnknownPlayer", wallet.ErrUnknownPlayer, answered{status: 500, code: "internal", detail: internalGET}},
	// The bare sentinels of the typed errors below answer nothing of their
	// own: the API answers the typed error, which carries the details.
	{"wallet.ErrOutstandingDebt", wallet.ErrOutstandingDebt, answered{status: 500, code: "internal", detail: internalGET}},
	{"wallet.ErrReservedKey", wallet.ErrReservedKey, answered{status: 500, code: "internal", detail: internalGET}},
	{"wallet.OutstandingDebtError", &wallet.OutstandingDebtError{Mana: 7}, answered{status: 409, code: "outstanding_debt",
		detail: "the player owes 7 Mana after a refund or chargeback; a purchase settles it first"}},
	{"wallet.ReservedKeyError", &wallet.ReservedKeyError{Key: "order:1", Namespace: "order:", Use: "orders"}, answered{status: 400,
		code: "invalid_idempotency_key", detail: `Idempotency-Key "order:1" starts with "order:", which billing reserves for orders: choose another key`}},
	{"wallet.KeyReusedError", &wallet.KeyReusedError{Key: "k", Field: "amount"}, answered{status: 422, code: "idempotency_key_reused", detail: keyReused}},

	{"enforcer.ErrNotFound", enforcer.ErrNotFound, answered{status: 404, code: "not_found", detail: notFound}},
	{"enforcer.ErrNotFunded", enforcer.ErrNotFunded, answered{status: 402, code: "marquee_not_funded", detail: "the Marquee is not funded: add Sparks and fund it first"}},
	{"enforcer.ErrUnknownPlan", enforcer.ErrUnknownPlan, answered{status: 400, code: "unknown_plan", detail: "no such plan"}},
	{"enforcer.ErrInvalidName", enforcer.ErrInvalidName, answered{status: 400, code: "invalid_name", detail: "a Marquee's name must be 1 to 100 printable characters"}},
	{"enforcer.ErrUnknownPlayer", enforcer.ErrUnknownPlayer, answered{status: 500, code: "internal", detail: internalGET}},
	{"enforcer.ErrInvalidDay", enforcer.ErrInvalidDay, answered{status: 500, code: "internal", detail: internalGET}},

	{"fulfillment.ErrUnknownSKU", fulfillment.ErrUnknownSKU, answered{status: 400, code: "unknown_sku", detail: "no such SKU"}},
	{"provider.ErrUnknown", provider.ErrUnknown, answered{status: 400, code: "unknown_provider", detail: "provider must be stripe, paddle or creem"}},
	{"fulfillment.ErrNotFound", fulfillment.ErrNotFound, answered{status: 404, code: "not_found", detail: notFound}},
	{"fulfillment.ErrCheckoutKeyReused", fulfillment.ErrCheckoutKeyReused, answered{status: 422, code: "idempotency_key_reused", detail: keyReused}},
	{"fulfillment.ErrPaymentMismatch", fulfillment.ErrPaymentMismatch, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrPaymentNotFound", fulfillment.ErrPaymentNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrNotUnapplied", fulfillment.ErrNotUnapplied, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrRefundedOtherwise", fulfillment.ErrRefundedOtherwise, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrInvalidRefundID", fulfillment.ErrInvalidRefundID, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrUnappliedPayment", fulfillment.ErrUnappliedPayment, answered{status: 500, code: "internal", detail: internalGET}},
	{"fulfillment.ErrReversalRefused", fulfillment.ErrReversalRefused, answered{status: 500, code: "internal", detail: internalGET}},

	{"players.ErrUnauthorized", players.ErrUnauthorized, answered{status: 401, code: "unauthorized",
		detail: "a valid API key is required: Authorization: Bearer <key>", bearer: `Bearer realm="billing"`}},
	{"players.ErrInvalidName", players.ErrInvalidName, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrPlayerNotFound", players.ErrPlayerNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrKeyNotFound", players.ErrKeyNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrKeyRevoked", players.ErrKeyRevoked, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrKeyRotated", players.ErrKeyRotated, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrKeyAmbiguous", players.ErrKeyAmbiguous, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrNoKey", players.ErrNoKey, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrInvalidValidity", players.ErrInvalidValidity, answered{status: 500, code: "internal", detail: internalGET}},
	{"players.ErrInvalidReason", players.ErrInvalidReason, answered{status: 500, code: "internal", detail: internalGET}},

	{"playground.ErrNotFound", playground.ErrNotFound, answered{status: 404, code: "not_found", detail: notFound}},
	{"playground.ErrInvalidName", playground.ErrInvalidName, answered{status: 400, code: "invalid_name",
		detail: `a playground's name must be at most 200 printable characters (without one it is "playground")`}},

	{"idempotency.ErrInvalidKey", idempotency.ErrInvalidKey, answered{status: 400, code: "invalid_idempotency_key",
		detail: "Idempotency-Key must be 1 to 255 printable ASCII characters, quoted or bare"}},
	{"idempotency.ErrInUse", idempotency.ErrInUse, answered{status: 409, code: "idempotency_key_in_use",
		detail: "a request with this Idempotency-Key is still running; retry later", retryAfter: "1"}},
	{"idempotency.ErrReused", idempotency.ErrReused, answered{status: 422, code: "idempotency_key_reused", detail: keyReused}},
	{"idempotency.ErrBodyTooLarge", idempotency.ErrBodyTooLarge, answered{status: 413, code: "body_too_large", detail: "request body too large"}},
	{"idempotency.ErrBodyIncomplete", idempotency.ErrBodyIncomplete, answered{status: 400, code: "incomplete_body", detail: "the request body ended early; nothing was done"}},
	{"idempotency.ErrBodyTimeout", idempotency.ErrBodyTimeout, answered{status: 408, code: "body_timeout", detail: "the request body did not arrive in time; nothing was done"}},
	{"idempotency.ErrNoPlayer", idempotency.ErrNoPlayer, answered{status: 500, code: "internal", detail: internalGET}},

	{"requests.ErrNotFound", requests.ErrNotFound, answered{status: 404, code: "not_found", detail: notFound}},
	{"requests.ErrExpired", requests.ErrExpired, answered{status: 404, code: "not_found", detail: "this request is too old to be reported"}},

	{"checkout.ErrProviderUnavailable", checkout.ErrProviderUnavailable, answered{status: 422, code: "provider_unavailable",
		detail: "this payment provider is not available: it has no API key configured"}},

	{"provider.ErrDown", provider.ErrDown, answered{status: 503, code: "provider_down",
		detail: "the payment provider is not answering; retry after Retry-After", retryAfter: "1"}},
	{"provider.ErrRejected", provider.ErrRejected, answered{status: 502, code: "provider_rejected", detail: "the payment provider rejected the checkout"}},
	{"provider.ErrPriceMismatch", provider.ErrPriceMismatch, answered{status: 500, code: "checkout_misconfigured", detail: misconfig}},
	{"provider.ErrSKUNotConfigured", provider.ErrSKUNotConfigured, answered{status: 500, code: "checkout_misconfigured", detail: misconfig}},
	{"provider.DownError", &provider.DownError{Provider: "stripe", RetryAfter: 3 * time.Second, Err: errors.New("503")}, answered{status: 503,
		code: "provider_down", detail: "the payment provider is not answering; retry after Retry-After", retryAfter: "3"}},
	{"provider.RejectedError", &provider.RejectedError{Provider: "stripe", Status: 400, Message: "No such price"}, answered{status: 502,
		code: "provider_rejected", detail: "stripe rejected the checkout: No such price"}},
	{"provider.ErrNotRefundable", provider.ErrNotRefundable, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrMalformedPayload", provider.ErrMalformedPayload, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrMissingSignature", provider.ErrMissingSignature, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrMalformedSignature", provider.ErrMalformedSignature, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrBadSignature", provider.ErrBadSignature, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrStaleSignature", provider.ErrStaleSignature, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrNotConfigured", provider.ErrNotConfigured, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrUnsupported", provider.ErrUnsupported, answered{status: 500, code: "internal", detail: internalGET}},
	{"provider.ErrNoListing", provider.ErrNoListing, answered{status: 500, code: "internal", detail: internalGET}},

	// The API's decoder answers the strict reader's errors with positions
	// (decodeError, TestErrorDetailsAreTheAPIsOwn); bare, they are a 500.
	{"strictjson.ErrInvalidUTF8", strictjson.ErrInvalidUTF8, answered{status: 500, code: "internal", detail: internalGET}},
	{"strictjson.ErrSyntax", strictjson.ErrSyntax, answered{status: 500, code: "internal", detail: internalGET}},
	{"strictjson.ErrDuplicateName", strictjson.ErrDuplicateName, answered{status: 500, code: "internal", detail: internalGET}},
	{"strictjson.ErrCaseVariant", strictjson.ErrCaseVariant, answered{status: 500, code: "internal", detail: internalGET}},
	{"strictjson.ErrUnknownName", strictjson.ErrUnknownName, answered{status: 500, code: "internal", detail: internalGET}},
	{"strictjson.ErrType", strictjson.ErrType, answered{status: 500, code: "internal", detail: internalGET}},

	// The operator page and the CLI answer these; the API never meets them.
	{"timeline.ErrNotFound", timeline.ErrNotFound, answered{status: 500, code: "internal", detail: internalGET}},
	{"timeline.ErrInvalidID", timeline.ErrInvalidID, answered{status: 500, code: "internal", detail: internalGET}},
	{"webhook.ErrNotClaimed", webhook.ErrNotClaimed, answered{status: 500, code: "internal", detail: internalGET}},
	{"webhook.ErrLiveJob", webhook.ErrLiveJob, answered{status: 500, code: "internal", detail: internalGET}},
	{"rivercomplete.ErrNotRunning", rivercomplete.ErrNotRunning, answered{status: 500, code: "internal", detail: internalGET}},
	{"rivercomplete.ErrMode", rivercomplete.ErrMode, answered{status: 500, code: "internal", detail: internalGET}},
	{"jobhold.ErrNotHeld", jobhold.ErrNotHeld, answered{status: 500, code: "internal", detail: internalGET}},
	{"instancelock.HeldError", &instancelock.HeldError{Path: "/tmp/x"}, answered{status: 500, code: "internal", detail: internalGET}},

	{"durable.ErrNotDurable", durable.ErrNotDurable, answered{status: 503, code: "not_durable", retryAfter: "1",
		detail: "the database could not confirm the write on its standby; retry with the same Idempotency-Key after Retry-After"}},
}

// TestEveryExportedErrorAnswersAsBefore: each exported error of every
// package answers the status, code and detail the API gave it before the
// domains declared their answers, bare and wrapped with %w.
func TestEveryExportedErrorAnswersAsBefore(t *testing.T) {
	t.Parallel()
	for _, c := range exportedErrors {
		require.Equal(t, c.want, answerOf(t, c.err), c.name)
		require.Equal(t, c.want, answerOf(t, fmt.Errorf("handler: %w", fmt.Errorf("domain: %w", c.err))), "%s, wrapped", c.name)
	}
}

// TestErrorAnswersKeepTheOldOrder: where one error chain holds two errors
// with an answer, the answer is the one the old order-sensitive switch
// gave: a domain's answer beats the platform's (durable, deadlines)
// wherever it sits in the chain, and a typed error answers before what it
// wraps.
func TestErrorAnswersKeepTheOldOrder(t *testing.T) {
	t.Parallel()
	const down = "the payment provider is not answering; retry after Retry-After"
	cases := []struct {
		name       string
		err        error
		status     int
		code, want string
	}{
		// idempotency's bodyError wraps the read's failure: a body cut short
		// (io.ErrUnexpectedEOF, which durable.Unavailable counts as a lost
		// database connection) is the client's, not a 503.
		{"cut body", fmt.Errorf("%w: %w", idempotency.ErrBodyIncomplete, io.ErrUnexpectedEOF), 400, "incomplete_body", ""},
		{"reset body", fmt.Errorf("%w: %w", idempotency.ErrBodyIncomplete, syscall.ECONNRESET), 400, "incomplete_body", ""},
		{"slow body", fmt.Errorf("%w: %w", idempotency.ErrBodyTimeout, os.ErrDeadlineExceeded), 408, "body_timeout", ""},
		// A provider's last failure is a deadline or a reset connection: the
		// provider is down, not the request timed out or the database lost.
		{"provider deadline", &provider.DownError{Provider: "stripe", Err: context.DeadlineExceeded}, 503, "provider_down", down},
		{"provider reset", &provider.DownError{Provider: "stripe", Err: syscall.ECONNRESET}, 503, "provider_down", down},
		{"provider down, deadline outside", fmt.Errorf("%w: %w", context.DeadlineExceeded, &provider.DownError{Provider: "paddle"}),
			503, "provider_down", down},
		// The wallet's failed rollback joins the statement's error and the
		// rollback's: the statement's answer wins over the lost connection.
		{"rollback after refusal", fmt.Errorf("%w after %w: %w", errors.New("rollback"), wallet.ErrInsufficientBalance, pgconn.ErrConnClosed),
			409, "insufficient_balance", ""},
		{"deadline before a domain error", fmt.Errorf("%w: %w", context.DeadlineExceeded, players.ErrUnauthorized), 401, "unauthorized", ""},
		{"not durable before a domain error", fmt.Errorf("%w: %w", durable.ErrNotDurable, enforcer.ErrNotFunded), 402, "marquee_not_funded", ""},
		// Between the platform's: not durable, then unavailable, then timeout.
		{"not durable and unavailable", fmt.Errorf("%w: %w", pgconn.ErrConnClosed, durable.ErrNotDurable), 503, "not_durable", ""},
		{"unavailable", fmt.Errorf("commit: %w", pgconn.ErrConnClosed), 503, "unavailable", ""},
		{"timeout", fmt.Errorf("query: %w", context.DeadlineExceeded), 503, "timeout", "the request took too long; retry after Retry-After"},
		// A typed error answers with its own details, before its sentinel.
		{"debt", fmt.Errorf("convert: %w", &wallet.OutstandingDebtError{Mana: 3}), 409, "outstanding_debt", ""},
		{"reused with a field", fmt.Errorf("post: %w", &wallet.KeyReusedError{Key: "k", Field: "player"}), 422, "idempotency_key_reused", keyReused},
		{"rejected", fmt.Errorf("open: %w", &provider.RejectedError{Provider: "creem", Message: "bad product"}), 502, "provider_rejected",
			"creem rejected the checkout: bad product"},
		{"unknown", errors.New("boom"), 500, "internal", internalGET},
	}
	for _, c := range cases {
		got := answerOf(t, c.err)
		require.Equal(t, c.status, got.status, c.name)
		require.Equal(t, c.code, got.code, c.name)
		if c.want != "" {
			require.Equal(t, c.want, got.detail, c.name)
		}
	}
}

// TestEveryExportedErrorIsListed: every exported Err* value and *...Error
// type of the service's packages below cmd (the lab, dev tools, the kit and
// config aside: the API never meets them) is in exportedErrors, so a new
// error must state its answer there.
func TestEveryExportedErrorIsListed(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, c := range exportedErrors {
		require.False(t, listed[c.name], "%s is listed twice", c.name)
		listed[c.name] = true
	}
	root := filepath.Join("..", "..", "..")
	skip := []string{"lab", "cmd", "config", "fibe", "internal/dev", "internal/kit", "internal/payments/sim"}
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(rel, "internal/web/httpapi/") {
			return nil
		}
		for _, name := range exportedErrorNames(t, path) {
			found++
			require.True(t, listed[name], "%s (%s) is not in exportedErrors: say what the API answers for it", name, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, found, len(exportedErrors)-1, "the walk found the module's errors")
}

// exportedErrorNames are the "package.Name" of path's exported Err* values
// and exported types named ...Error.
func exportedErrorNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var names []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gen.Specs {
			switch s := spec.(type) {
			case *ast.ValueSpec:
				for _, id := range s.Names {
					if gen.Tok == token.VAR && id.IsExported() && strings.HasPrefix(id.Name, "Err") {
						names = append(names, f.Name.Name+"."+id.Name)
					}
				}
			case *ast.TypeSpec:
				if s.Name.IsExported() && strings.HasSuffix(s.Name.Name, "Error") {
					names = append(names, f.Name.Name+"."+s.Name.Name)
				}
			}
		}
	}
	return names
}
