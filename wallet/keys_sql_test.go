package wallet

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// sqlConn is a connection to the tests' PostgreSQL: the fragments are
// evaluated there, by the server that runs the queries built from them.
func sqlConn(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// evalText evaluates the text expression expr with args in PostgreSQL.
func evalText(t *testing.T, conn *pgx.Conn, expr string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT "+expr, args...).Scan(&s), expr)
	return s
}

// Every SQL key builder, evaluated in PostgreSQL for sample ids and keys,
// spells exactly what its Go form builds.
func TestSQLKeysMatchTheirGoForms(t *testing.T) {
	t.Parallel()
	conn := sqlConn(t)
	for _, id := range []int64{1, 42, 1<<53 + 1, math.MaxInt64} {
		require.Equal(t, FulfilmentKey(id).String(), evalText(t, conn, SQLFulfilmentKey("$1::bigint"), id))
		require.Equal(t, FundingKey(id, "2026-03-01").String(), evalText(t, conn, SQLFundingKey("$1::bigint", "$2::text"), id, "2026-03-01"))
		require.Equal(t, ReversalPrefix(id), evalText(t, conn, SQLReversalPrefix("$1::bigint"), id))
		step := ReversalKey(id, 3, "re_1")
		require.True(t, strings.HasPrefix(step.String(), ReversalPrefix(id)))
		for _, k := range []Key{ReversalKey(id, 3, "re:1:x"), ReversalKey(id, 3, "re_1").leg(debtSuffix)} {
			payment, n := SQLReversalStep("$1::text")
			require.Equal(t, strconv.FormatInt(id, 10), evalText(t, conn, payment, k.String()))
			require.Equal(t, "3", evalText(t, conn, n, k.String()))
		}
		require.Equal(t, step.GivenBack().recovery().String(), evalText(t, conn, SQLRecoveryKey("$1::text"), step.GivenBack().String()))
		require.Equal(t, FulfilmentKey(id).Settlement().String(), evalText(t, conn, SQLSettlementKey("$1::text"), FulfilmentKey(id).String()))
	}
	for _, key := range scopedSamples() {
		api := APIKey(7, "conversion", key)
		require.Equal(t, api.String(), evalText(t, conn, SQLAPIKey("$1::bigint", "$2::text", "$3::text"), int64(7), "conversion", key), "key of %d bytes", len(key))
		op := OperatorKey(OperatorForgive, key)
		require.Equal(t, op.String(), evalText(t, conn, SQLOperatorKey("$1::text", "$2::text"), OperatorForgive, key), "key of %d bytes", len(key))
		debit, credit := SQLConversionKeys("$1::text")
		require.Equal(t, api.leg(ManaDebitSuffix).String(), evalText(t, conn, debit, api.String()))
		require.Equal(t, api.leg(SparksCreditSuffix).String(), evalText(t, conn, credit, api.String()))
	}
}

// scopedSamples are client and operator keys around the length at which
// the api and operator forms switch to their hashed form, multi-byte ones
// among them (the rule counts bytes).
func scopedSamples() []string {
	ns := len("operator:" + OperatorForgive + ":")
	return []string{"k", "abc:def", "ключ", strings.Repeat("x", maxScoped-ns), strings.Repeat("x", maxScoped-ns+1),
		strings.Repeat("é", 100), strings.Repeat("x", 255), "it's"}
}

// Every SQL key predicate, evaluated in PostgreSQL over a key of every
// form the wallet derives, is true for exactly the keys of its Go form.
func TestSQLKeyPredicatesMatchTheirGoForms(t *testing.T) {
	t.Parallel()
	conn := sqlConn(t)
	order, step := FulfilmentKey(42), ReversalKey(9, 3, "re_1")
	back := step.GivenBack()
	api, op := APIKey(5, "conversion", "abc"), OperatorKey(OperatorForgive, "k")
	all := []Key{order, order.Settlement(), FundingKey(7, "2026-03-01"), step, back, back.recovery(), back.Settlement(),
		step.leg(debtSuffix), step.leg(clawManaSuffix), step.leg(clawSparksSuffix), api, api.leg(ManaDebitSuffix),
		api.leg(SparksCreditSuffix), op, op.leg(writeOffSuffix), op.leg(receivableSuffix), OperatorKey(OperatorAdjust, "k"),
		CallerKey("bench:1"), CallerKey("payment"), CallerKey("order:1:fulfilment"), CallerKey("payment:9:back")}
	reversal := []Key{step, back, back.recovery(), back.Settlement(), step.leg(debtSuffix), step.leg(clawManaSuffix),
		step.leg(clawSparksSuffix), CallerKey("payment:9:back")}
	for name, c := range map[string]struct {
		pred func(string) string
		want []Key
	}{
		"fulfilment": {SQLIsFulfilmentKey, []Key{order, CallerKey("order:1:fulfilment")}},
		"reversal":   {SQLIsReversalKey, reversal},
		"given back": {SQLIsGivenBack, []Key{back, CallerKey("payment:9:back")}},
		"recovery":   {SQLIsRecovery, []Key{back.recovery()}},
	} {
		for _, k := range all {
			var got bool
			require.NoError(t, conn.QueryRow(context.Background(), "SELECT "+c.pred("$1::text"), k.String()).Scan(&got))
			want := false
			for _, w := range c.want {
				want = want || w.String() == k.String()
			}
			require.Equal(t, want, got, "%s predicate on %q", name, k.String())
		}
	}
}
