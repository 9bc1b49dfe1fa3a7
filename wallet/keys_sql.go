package wallet

// The key grammar in SQL. A query that names the system's keys (the
// audits, the operator's timeline) builds them with these fragments, so
// the grammar has one home: TestSQLKeysMatchTheirGoForms evaluates each
// fragment in PostgreSQL and compares it with the Go form it mirrors.
//
// Each builder takes SQL expressions (a column, a parameter, a function
// call) and returns a chain of || concatenations, unparenthesised as the
// queries have always spelled them: || binds tighter than comparisons,
// LIKE and IN, so the chain is an operand of those, or of a function,
// as it stands. Each predicate returns a boolean expression, parenthesised
// when it is a conjunction.

import (
	"strconv"
	"strings"
)

// sqlText is s as an SQL string literal.
func sqlText(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// concat joins SQL expressions with ||.
func concat(exprs ...string) string { return strings.Join(exprs, " || ") }

// SQLFulfilmentKey is FulfilmentKey of the order id orderID (a bigint
// expression): 'order:' || <orderID> || ':fulfilment'.
func SQLFulfilmentKey(orderID string) string {
	return concat(sqlText(orderPrefix), orderID, sqlText(fulfilmentSuffix))
}

// SQLIsFulfilmentKey is true when key (a text expression) is a
// FulfilmentKey: <key> LIKE 'order:%:fulfilment'.
func SQLIsFulfilmentKey(key string) string {
	return key + " LIKE " + sqlText(orderPrefix+"%"+fulfilmentSuffix)
}

// SQLFundingKey is FundingKey of Marquee marqueeID (a bigint expression)
// for day (a text expression, YYYY-MM-DD):
// 'marquee:' || <marqueeID> || ':' || <day> || ':funding'.
func SQLFundingKey(marqueeID, day string) string {
	return concat(sqlText(marqueePrefix), marqueeID, sqlText(":"), day, sqlText(fundingSuffix))
}

// SQLReversalPrefix is ReversalPrefix of payment paymentID (a bigint
// expression): 'payment:' || <paymentID> || ':'.
func SQLReversalPrefix(paymentID string) string {
	return concat(sqlText(paymentPrefix), paymentID, sqlText(":"))
}

// SQLIsReversalKey is true when key (a text expression) is the key of a
// payment's reversal step or of a leg derived from one: <key> LIKE
// 'payment:%', the predicate of the partial index on those keys.
func SQLIsReversalKey(key string) string {
	return key + " LIKE " + sqlText(paymentPrefix+"%")
}

// SQLReversalStep is the payment and the step (text expressions, in
// decimal) of key (a text expression), the key of a reversal step or of
// a leg derived from one (SQLIsReversalKey): payment:<payment>:<step>:...
// The reversal id that follows may hold ':'; the two fields before it
// never do.
func SQLReversalStep(key string) (payment, step string) {
	return "split_part(" + key + ", ':', 2)", "split_part(" + key + ", ':', 3)"
}

// SQLIsGivenBack is true when key (a text expression) is the GivenBack key
// of a reversal step: (<key> LIKE 'payment:%' AND right(<key>, 5) = ':back').
func SQLIsGivenBack(key string) string { return sqlIsReversalLeg(key, givenBackSuffix) }

// SQLRecoveryKey is the key of the leg that recovers a write-off out of
// the Mana given back under back (a text expression, a GivenBack key):
// <back> || ':write_off'.
func SQLRecoveryKey(back string) string { return concat(back, sqlText(writeOffSuffix)) }

// SQLIsRecovery is true when key (a text expression) is the key of a leg
// that recovered a write-off out of Mana given back (not a forgiveness's
// own write-off): (<key> LIKE 'payment:%' AND right(<key>, 15) =
// ':back:write_off').
func SQLIsRecovery(key string) string { return sqlIsReversalLeg(key, recoverySuffix) }

func sqlIsReversalLeg(key, suffix string) string {
	return "(" + SQLIsReversalKey(key) + " AND right(" + key + ", " + strconv.Itoa(len(suffix)) + ") = " + sqlText(suffix) + ")"
}

// SQLSettlementKey is Settlement of key (a text expression): the key of
// the debt a Mana credit under it settles, <key> || ':settle'.
func SQLSettlementKey(key string) string { return concat(key, sqlText(settleSuffix)) }

// SQLConversionKeys are the keys of the two legs of a conversion under key
// (a text expression): <key> || ':mana_debit' and <key> || ':sparks_credit'.
func SQLConversionKeys(key string) (manaDebit, sparksCredit string) {
	return concat(key, sqlText(ManaDebitSuffix)), concat(key, sqlText(SparksCreditSuffix))
}

// SQLAPIKey is APIKey for player playerID (a bigint expression), purpose
// (a text expression) and the client's key clientKey (a text expression):
// the api:<player>:<purpose>:<key> form, or its /sha256:<hex> form past
// the length that leaves room for the legs.
func SQLAPIKey(playerID, purpose, clientKey string) string {
	return sqlScoped(concat(sqlText(apiPrefix), playerID, sqlText(":"), purpose), clientKey)
}

// SQLOperatorKey is OperatorKey for purpose (a text expression) and the
// operator's key (a text expression).
func SQLOperatorKey(purpose, key string) string {
	return sqlScoped(concat(sqlText(operatorPrefix), purpose), key)
}

// sqlScoped is scoped in SQL: ns:key, or ns/sha256:<hex> when that is
// longer than maxScoped bytes.
func sqlScoped(ns, key string) string {
	plain := concat(ns, sqlText(":"), key)
	return "CASE WHEN octet_length(" + plain + ") <= " + strconv.Itoa(maxScoped) + " THEN " + plain +
		" ELSE " + concat(ns, sqlText(hashedSeparator), "encode(sha256(convert_to("+key+", 'UTF8')), 'hex')") + " END"
}
