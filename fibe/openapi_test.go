package fibe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/api"
	"github.com/fibe-dev/billing/fibe"
)

// schema is the part of an OpenAPI schema this test reads.
type schema struct {
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
	Examples   []json.RawMessage          `json:"examples"`
}

// TestTypesMatchOpenAPI checks every SDK request and response type against
// the API's OpenAPI document (api/openapi.yaml): each field the SDK sends
// or reads is a documented property, each property the document requires
// is one the SDK has, and the document's examples decode into the SDK type
// with no unknown field.
func TestTypesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	raw, err := api.JSON()
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))

	for name, v := range map[string]any{
		"Balance":             fibe.Balance{},
		"Wallets":             fibe.Wallets{},
		"Transaction":         fibe.Transaction{},
		"TransactionPage":     fibe.TransactionList{},
		"Conversion":          fibe.Conversion{},
		"ConversionRequest":   fibe.ConversionParams{},
		"Order":               fibe.Order{},
		"OrderPayment":        fibe.OrderPayment{},
		"PaymentReversal":     fibe.PaymentReversal{},
		"CheckoutRequest":     fibe.CheckoutParams{},
		"Marquee":             fibe.Marquee{},
		"MarqueeList":         fibe.MarqueeList{},
		"MarqueeRequest":      fibe.MarqueeParams{},
		"AcceptedPlayground":  fibe.Accepted{},
		"Playground":          fibe.Playground{},
		"PlaygroundRequest":   fibe.PlaygroundParams{},
		"FundRequest":         fibe.Request{},
		"PlaygroundOperation": fibe.Request{},
		"FundResult":          fibe.FundResult{},
	} {
		s, ok := doc.Components.Schemas[name]
		require.True(t, ok, "schema %s is not in the document", name)
		fields := jsonFields(reflect.TypeOf(v))
		for _, f := range fields {
			require.Contains(t, s.Properties, f, "fibe.%T field %q is not a property of schema %s", v, f, name)
		}
		for _, r := range s.Required {
			require.Contains(t, fields, r, "schema %s requires %q, which fibe.%T lacks", name, r, v)
		}
		for _, ex := range s.Examples {
			dec := json.NewDecoder(bytes.NewReader(ex))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(reflect.New(reflect.TypeOf(v)).Interface()), "example of %s", name)
		}
	}
}

// jsonFields are the JSON member names of a struct type.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// TestExampleOrdersMatchOpenAPI: the orders the examples' fake server
// answers are valid Orders of the document, so the examples show what the
// real API sends (refunded_amount, clawed_back_mana, checkout_url).
func TestExampleOrdersMatchOpenAPI(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.YAML)
	require.NoError(t, err)
	order := doc.Components.Schemas["Order"].Value
	srv := startFakeAPI()
	defer srv.Close()
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/checkouts", `{"sku":"mana_1000","provider":"stripe"}`},
		{http.MethodGet, "/v1/orders/9", ""},
		{http.MethodGet, "/v1/orders/10", ""},
	} {
		r, err := http.NewRequest(req.method, srv.URL+req.path, strings.NewReader(req.body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		var body any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		require.NoError(t, resp.Body.Close())
		require.NoError(t, order.VisitJSON(body), "%s %s answers an order the document refuses", req.method, req.path)
	}
}

// TestEventsMatchOpenAPI checks the SDK's event types against the
// document's webhooks: one webhook per type fibe knows and no other, the
// envelope's members are fibe.Event's, each type's data schema has exactly
// the members of its fibe struct, and each webhook's example decodes into
// fibe's types with no unknown member and validates against its schema.
func TestEventsMatchOpenAPI(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.YAML)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	schemas := doc.Components.Schemas

	requireSameMembers(t, schemas["Event"].Value, reflect.TypeOf(fibe.Event{}), "Event")
	require.Equal(t, []any{fibe.EventAPIVersion}, schemas["Event"].Value.Properties["api_version"].Value.Enum)
	var enum []string
	for _, v := range schemas["EventType"].Value.Enum {
		enum = append(enum, v.(string))
	}
	require.Equal(t, fibe.EventTypes(), enum, "EventType lists the SDK's types in its order")
	require.Len(t, doc.Webhooks, len(fibe.EventTypes()), "one webhook per event type")

	for _, typ := range fibe.EventTypes() {
		item := doc.Webhooks[typ]
		require.NotNil(t, item, "no webhook %s in the document", typ)
		require.NotNil(t, item.Post, "webhook %s is not a POST", typ)
		data, err := (&fibe.Event{Type: typ, Data: []byte(`{}`)}).Decode()
		require.NoError(t, err)
		goType := reflect.TypeOf(data).Elem()
		require.Contains(t, schemas, goType.Name(), "no schema %s for %s", goType.Name(), typ)
		requireSameMembers(t, schemas[goType.Name()].Value, goType, goType.Name())

		media := item.Post.RequestBody.Value.Content.Get("application/json")
		require.NotNil(t, media, "webhook %s has no JSON body", typ)
		require.Len(t, media.Examples, 1, "webhook %s has one example", typ)
		for _, ex := range media.Examples {
			require.NoError(t, media.Schema.Value.VisitJSON(ex.Value.Value), "example of %s", typ)
			raw, err := json.Marshal(ex.Value.Value)
			require.NoError(t, err)
			var ev fibe.Event
			strictDecode(t, raw, &ev)
			require.Equal(t, typ, ev.Type)
			strictDecode(t, ev.Data, reflect.New(goType).Interface())
			wrong := map[string]any{}
			require.NoError(t, json.Unmarshal(raw, &wrong))
			wrong["type"] = otherType(typ)
			require.Error(t, media.Schema.Value.VisitJSON(wrong), "the %s schema accepts another type", typ)
		}
	}
}

// requireSameMembers: the schema's properties are exactly the struct's
// JSON members, and all of them are required (billing always sends each).
func requireSameMembers(t *testing.T, s *openapi3.Schema, goType reflect.Type, name string) {
	t.Helper()
	var props []string
	for p := range s.Properties {
		props = append(props, p)
	}
	fields := jsonFields(goType)
	require.ElementsMatch(t, fields, props, "schema %s and fibe.%s", name, goType.Name())
	require.ElementsMatch(t, fields, s.Required, "schema %s requires every member", name)
}

func strictDecode(t *testing.T, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "%s into %T", raw, v)
}

func otherType(typ string) string {
	if typ == fibe.EventOrderFulfilled {
		return fibe.EventDebtOpened
	}
	return fibe.EventOrderFulfilled
}
