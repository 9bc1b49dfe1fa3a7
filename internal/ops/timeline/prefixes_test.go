package timeline_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/ops/timeline"
)

// An id's prefix names its provider, several when providers share it,
// none for an event id or an unknown prefix.
func TestProvidersOf(t *testing.T) {
	t.Parallel()
	for id, want := range map[string][]string{
		"cs_test_1": {"stripe"}, "pi_1": {"stripe"}, "re_1": {"stripe"}, "dp_1": {"stripe"}, "du_1": {"stripe"},
		"charge:ch_1": {"stripe"}, "txn_01h": {"paddle"}, "adj_1": {"paddle"}, "chargeback:txn_1": {"paddle"},
		"ord_1": {"creem"}, "ch_1": {"stripe", "creem"}, "evt_1": nil, "something": nil, "": nil,
	} {
		require.Equal(t, want, timeline.ProvidersOf(id), id)
	}
}
