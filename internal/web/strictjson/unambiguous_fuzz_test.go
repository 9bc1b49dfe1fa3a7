package strictjson_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/strictjson"
)

// FuzzUnmarshalIsUnambiguous: whatever body Unmarshal accepts with
// RejectUnknown (as the API decodes every request body), a lenient reader
// (encoding/json: last duplicate wins, names matched case-insensitively,
// invalid escapes replaced) and a first-wins reader (as some proxies read)
// see the same values, and the body names only the fields as spelled. A
// proxy in front of the API therefore cannot see another amount or name
// than the one applied. (It lives here, not beside the API's handlers, so
// that fuzzing builds this small package rather than the API's tests.)
func FuzzUnmarshalIsUnambiguous(f *testing.F) {
	for _, s := range []string{`{"mana":1}`, `{"mana":1,"mana":1000}`, `{"MANA":3}`, `{"Mana":3,"name":"x"}`,
		`{"name":"a","name":"b"}`, `{"name":"\ud800"}`, `{"name":"caf\u00e9"}`, `{"mana":1e2}`, `{"mana":"5"}`,
		`null`, `{}`, `{"mana":9223372036854775807}`, `{"name":"a\u0000"}`, "{\"name\":\"\xff\"}", `{"nam\u0065":"x"}`} {
		f.Add(s)
	}
	type body struct {
		Mana int64  `json:"mana"`
		Name string `json:"name"`
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var strict body
		if strictjson.Unmarshal([]byte(raw), &strict, strictjson.Options{RejectUnknown: true}) != nil {
			return
		}
		var lenient body
		require.NoError(t, json.Unmarshal([]byte(raw), &lenient), "accepted by Unmarshal")
		require.Equal(t, lenient, strict, "a lenient reader sees the same values")
		members, ok := firstWins(raw)
		if !ok {
			return // not an object (null): nothing to disagree about
		}
		for name := range members {
			require.Contains(t, []string{"mana", "name"}, name, "only names spelled as fields are accepted")
		}
		first, err := json.Marshal(members)
		require.NoError(t, err)
		var firstBody body
		require.NoError(t, json.Unmarshal(first, &firstBody))
		require.Equal(t, firstBody, strict, "a first-wins reader sees the same values")
	})
}

// firstWins reads raw's top-level object keeping the first occurrence of
// each member name.
func firstWins(raw string) (map[string]json.RawMessage, bool) {
	dec := jsontext.NewDecoder(strings.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	seen := map[string]json.RawMessage{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		name := tok.String() // before the next read voids tok
		val, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		if _, dup := seen[name]; !dup {
			seen[name] = append(json.RawMessage(nil), val...)
		}
	}
	return seen, true
}
