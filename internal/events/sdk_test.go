package events_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/internal/events"
)

// catalogueData is the data struct of each type in catalogue.go, the one
// the service marshals into the body.
var catalogueData = map[string]any{
	events.OrderFulfilled:         events.OrderFulfilledData{},
	events.PaymentUnapplied:       events.PaymentUnappliedData{},
	events.PaymentRefunded:        events.PaymentRefundedData{},
	events.ReversalApplied:        events.ReversalAppliedData{},
	events.ReversalRefused:        events.ReversalRefusedData{},
	events.DebtOpened:             events.DebtOpenedData{},
	events.DebtSettled:            events.DebtSettledData{},
	events.DebtForgiven:           events.DebtForgivenData{},
	events.MarqueeFunded:          events.MarqueeFundedData{},
	events.MarqueeUnfunded:        events.MarqueeUnfundedData{},
	events.WalletLowBalance:       events.BalanceData{},
	events.WalletBalanceRecovered: events.BalanceData{},
}

// TestSDKHasTheCatalogue: the SDK (fibe/events.go) cannot import this
// package, so it repeats the catalogue. Every type constant declared in
// catalogue.go is in events.Types, has a data struct here and an SDK
// constant of the same string; and for every type the SDK's data struct
// has the same JSON members, of the same kinds, as the catalogue's.
func TestSDKHasTheCatalogue(t *testing.T) {
	t.Parallel()
	declared := catalogueConstants(t)
	require.ElementsMatch(t, declared, events.Types, "catalogue.go's type constants are events.Types")
	require.Equal(t, events.Types, fibe.EventTypes(), "the SDK's types, in catalogue order")
	require.Equal(t, events.APIVersion, fibe.EventAPIVersion)
	for _, typ := range events.Types {
		data, ok := catalogueData[typ]
		require.True(t, ok, "no catalogue data struct for %s in this test", typ)
		raw, err := (&fibe.Event{ID: events.ID(typ, "k"), Type: typ, Data: []byte(`{}`)}).Decode()
		require.NoError(t, err, "the SDK decodes %s", typ)
		sdk := reflect.TypeOf(raw).Elem()
		require.Equal(t, jsonShape(t, reflect.TypeOf(data)), jsonShape(t, sdk),
			"%s: fibe.%s and events.%T differ (JSON member: kind)", typ, sdk.Name(), data)
	}
}

// TestShapeSeesDrift: the comparison above fails on a renamed member and
// on a member of another kind.
func TestShapeSeesDrift(t *testing.T) {
	t.Parallel()
	type renamed struct {
		OrderID         int64 `json:"order"`
		ManaOpened      int64 `json:"mana_opened"`
		ManaOutstanding int64 `json:"mana_outstanding"`
	}
	type retyped struct {
		OrderID         string `json:"order_id"`
		ManaOpened      int64  `json:"mana_opened"`
		ManaOutstanding int64  `json:"mana_outstanding"`
	}
	want := jsonShape(t, reflect.TypeFor[events.DebtOpenedData]())
	require.Equal(t, want, jsonShape(t, reflect.TypeFor[fibe.DebtOpenedData]()))
	require.NotEqual(t, want, jsonShape(t, reflect.TypeFor[renamed]()))
	require.NotEqual(t, want, jsonShape(t, reflect.TypeFor[retyped]()))
}

// jsonShape maps each JSON member of struct type st to its Go kind. A
// time.Time is a string: it marshals to one (RFC 3339), which is what the
// catalogue writes by hand.
func jsonShape(t *testing.T, st reflect.Type) map[string]string {
	t.Helper()
	require.Equal(t, reflect.Struct, st.Kind(), "%s", st)
	out := map[string]string{}
	for f := range st.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		require.NotEmpty(t, name, "%s.%s has no json name", st, f.Name)
		require.NotEqual(t, "-", name, "%s.%s is not sent", st, f.Name)
		kind := f.Type.Kind().String()
		if f.Type == reflect.TypeFor[time.Time]() {
			kind = reflect.String.String()
		}
		out[name] = kind
	}
	return out
}

// catalogueConstants are the string values of the constants catalogue.go
// declares in the block that holds events.OrderFulfilled: read from the
// source, so a type added there and forgotten in events.Types is caught.
func catalogueConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "catalogue.go", nil, 0)
	require.NoError(t, err)
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || !declares(g, "OrderFulfilled") {
			continue
		}
		var out []string
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				require.True(t, ok, "a catalogue constant that is not a string literal")
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, s)
			}
		}
		return out
	}
	require.FailNow(t, "catalogue.go declares no OrderFulfilled")
	return nil
}

func declares(g *ast.GenDecl, name string) bool {
	for _, s := range g.Specs {
		for _, n := range s.(*ast.ValueSpec).Names {
			if n.Name == name {
				return true
			}
		}
	}
	return false
}
