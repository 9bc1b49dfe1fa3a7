package strictjson_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/strictjson"
)

type event struct {
	ID     string          `json:"id"`
	Amount *int64          `json:"amount"`
	Data   json.RawMessage `json:"data"`
}

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		o          strictjson.Options
		want       error
	}{
		{"plain", `{"id":"evt_1","amount":5,"data":{"x":1},"other":[1,2]}`, strictjson.Options{}, nil},
		{"duplicate", `{"id":"evt_1","id":"evt_2"}`, strictjson.Options{}, strictjson.ErrDuplicateName},
		{"duplicate inside a value nobody reads", `{"id":"e","other":{"y":1,"y":2}}`, strictjson.Options{}, strictjson.ErrDuplicateName},
		{"duplicate inside a raw value", `{"id":"e","data":{"y":1,"y":2}}`, strictjson.Options{}, strictjson.ErrDuplicateName},
		{"case variant beside the name", `{"id":"evt_1","ID":"evt_2"}`, strictjson.Options{}, strictjson.ErrCaseVariant},
		{"case variant alone", `{"Id":"evt_2"}`, strictjson.Options{}, strictjson.ErrCaseVariant},
		{"unknown refused", `{"id":"e","MANA":3}`, strictjson.Options{RejectUnknown: true}, strictjson.ErrUnknownName},
		{"invalid UTF-8", "{\"id\":\"e\xff\"}", strictjson.Options{}, strictjson.ErrInvalidUTF8},
		{"syntax", `{"id":"e",}`, strictjson.Options{}, strictjson.ErrSyntax},
		{"trailing data", `{"id":"e"} {}`, strictjson.Options{}, strictjson.ErrSyntax},
		{"wrong type", `{"id":5}`, strictjson.Options{}, strictjson.ErrType},
		{"overflow", `{"amount":18446744073709551616}`, strictjson.Options{}, strictjson.ErrType},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var e event
			err := strictjson.Unmarshal([]byte(c.body), &e, c.o)
			if c.want == nil {
				require.NoError(t, err)
				require.Equal(t, "evt_1", e.ID)
				return
			}
			require.ErrorIs(t, err, c.want)
		})
	}
}
