package audit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/wallet"
)

// TestParseViolation reads the invariant and check of a line of every
// check's own String form.
func TestParseViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line fmtStringer
		want audit.Violation
	}{
		{wallet.Violation{Invariant: 2, Check: "zero_sum", TransactionID: 7, Detail: "entries sum to 5"},
			audit.Violation{Invariant: 2, Check: "zero_sum"}},
		{wallet.Violation{Invariant: 1, Check: "negative", Detail: "sum below zero"},
			audit.Violation{Invariant: 1, Check: "negative"}},
		{enforcer.FundingViolation{Check: "double_debit", MarqueeID: 3, Detail: "two debits"},
			audit.Violation{Invariant: 4, Check: "double_debit"}},
		{fulfillment.Violation{Invariant: 5, Check: "double_credit", OrderID: 9, Detail: "credited twice"},
			audit.Violation{Invariant: 5, Check: "double_credit"}},
		{webhook.Violation{Invariant: 6, Check: "no_job", Provider: "stripe", EventID: "evt_1", Detail: "claimed without a job"},
			audit.Violation{Invariant: 6, Check: "no_job"}},
	} {
		line := tc.line.String()
		tc.want.Line = line
		require.Equal(t, tc.want, audit.ParseViolation(line), line)
	}
	require.Equal(t, audit.Violation{Line: "odd"}, audit.ParseViolation("odd"))
}

type fmtStringer interface{ String() string }
