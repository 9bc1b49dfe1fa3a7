package events

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// The audit's SQL forms of the events' own keys, evaluated in
// PostgreSQL, are their Go forms: a drift would make the audit look for
// ids no effect was reported under.
func TestSQLKeysMatchTheirGoForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := testdb.Tx(t) // it only reads
	eval := func(sql string, args ...any) string {
		t.Helper()
		var s string
		require.NoError(t, tx.QueryRow(ctx, "SELECT "+sql, args...).Scan(&s))
		return s
	}
	for _, id := range []int64{1, 42, 1 << 53} {
		require.Equal(t, UnappliedKey(id), eval(sqlUnappliedKey("$1::bigint"), id))
		require.Equal(t, RefundedKey(id), eval(sqlRefundedKey("$1::bigint"), id))
		require.Equal(t, DebtOpenedKey(id, 3), eval(sqlDebtOpenedKey("$1::bigint::text", "$2::text"), id, "3"))
	}
	require.Equal(t, ReversalEventKey("stripe", "evt_1:x"), eval(sqlReversalEventKey("$1::text", "$2::text"), "stripe", "evt_1:x"))
	require.Equal(t, DebtSettledKey("order:7:fulfilment"), eval(sqlDebtSettledKey("$1::text"), "order:7:fulfilment"))
	require.Equal(t, ID(DebtForgiven, "k"), eval(idSQL(DebtForgiven, "$1::text"), "k"))
}
