package wallet

// The key grammar. Every post carries a Key, and every Key is made here:
// the keys the system derives read as what the post is for, and a key a
// caller or an operator chooses can never spell one of them.
//
//	order:<order id>:fulfilment                 the Mana a paid order mints
//	payment:<payment>:<step>:<reversal id>      step n of a payment's reversals
//	marquee:<marquee id>:<YYYY-MM-DD>:funding   a Marquee's funding for a day
//	api:<player>:<purpose>:<client key>         an API request's own post
//	operator:<purpose>:<operator key>           an operator's adjustment or forgiveness
//
// and the legs the wallet derives from a key K:
//
//	K:mana_debit, K:sparks_credit   a conversion's two legs
//	K:debt, K:mana, K:sparks        a clawback's legs
//	K:settle                        the debt a Mana credit settles
//	K:write_off, K:receivable       a forgiveness's two legs
//	K:back                          Mana a reversal step gives back
//	K:back:write_off                the write-off that Mana given back recovers
//	K:back:settle                   the debt that Mana given back settles
//
// The api and operator forms end in the caller's key; when that would
// leave no room for the legs, they end in /sha256:<hex of the key> instead
// (no purpose holds a '/', so the two forms never meet).
//
// Queries name these keys through the SQL fragments of keys_sql.go, never
// with a spelling of their own.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Key is a wallet idempotency key. Build one with a constructor of this
// file (FulfilmentKey, FundingKey, ReversalKey, APIKey, OperatorKey,
// CallerKey): a string cannot be passed where a Key is expected, so
// whatever an operator or a client typed goes through the one function
// that keeps it out of the system's namespaces.
type Key struct {
	s   string
	err error // why a caller's key may not be used; every post returns it
}

// String is the key as stored in wallet_transactions.idempotency_key.
func (k Key) String() string { return k.s }

// check returns why k cannot be posted under, or nil.
func (k Key) check() error {
	switch {
	case k.err != nil:
		return k.err
	case !validKey(k.s):
		return ErrInvalidKey
	}
	return nil
}

// leg is the key the wallet derives from k for one leg of an operation;
// it inherits k's refusal.
func (k Key) leg(suffix string) Key { return Key{s: k.s + suffix, err: k.err} }

// Suffixes of the legs the wallet derives from a key.
const (
	ManaDebitSuffix    = ":mana_debit"
	SparksCreditSuffix = ":sparks_credit"
	debtSuffix         = ":debt"
	clawManaSuffix     = ":mana"
	clawSparksSuffix   = ":sparks"
	settleSuffix       = ":settle"
	writeOffSuffix     = ":write_off"
	receivableSuffix   = ":receivable"
	givenBackSuffix    = ":back"
	// recoverySuffix (15 bytes) ends the key of the leg that recovers a
	// write-off out of Mana given back: <step key>:back:write_off.
	recoverySuffix = givenBackSuffix + writeOffSuffix
)

// The namespaces of the keys the system derives, and the parts of their
// forms that are fixed.
const (
	orderPrefix      = "order:"
	fulfilmentSuffix = ":fulfilment"
	paymentPrefix    = "payment:"
	marqueePrefix    = "marquee:"
	fundingSuffix    = ":funding"
	apiPrefix        = "api:"
	operatorPrefix   = "operator:"
	hashedSeparator  = "/sha256:"
)

// namespace is a reserved part of the key space and what it is kept for.
type namespace struct{ spelling, use string }

// reservedPrefixes start the keys the system derives.
var reservedPrefixes = []namespace{
	{orderPrefix, "an order's fulfilment, order:<order id>:fulfilment"},
	{paymentPrefix, "a payment's reversal steps, payment:<payment>:<step>:<reversal id>"},
	{marqueePrefix, "a Marquee's daily funding, marquee:<marquee id>:<day>:funding"},
	{apiPrefix, "the API's own posts, api:<player>:<purpose>:<key>"},
	{operatorPrefix, "operators' keys, operator:<purpose>:<key>"},
}

// reservedSuffixes end the legs the wallet derives from a key.
var reservedSuffixes = []namespace{
	{ManaDebitSuffix, "a conversion's Mana leg"},
	{SparksCreditSuffix, "a conversion's Sparks leg"},
	{debtSuffix, "a clawback's debt leg"},
	{clawManaSuffix, "a clawback's Mana leg"},
	{clawSparksSuffix, "a clawback's Sparks leg"},
	{settleSuffix, "the debt a Mana credit settles"},
	// Before writeOffSuffix, which it ends in: a refusal names the longer.
	{recoverySuffix, "the write-off that Mana given back recovers"},
	{writeOffSuffix, "a forgiveness's write-off leg"},
	{receivableSuffix, "a forgiveness's receivable leg"},
	{givenBackSuffix, "Mana a reversal step gives back"},
}

// KeySpellings are the fixed parts of the keys the system derives: the
// namespaces they start with (order:, payment:, ...) and what their forms
// and legs end with (:fulfilment, :settle, ...). No code outside the
// wallet spells one (the architecture test holds it): it builds keys with
// this file's constructors, or in SQL with keys_sql.go's fragments.
func KeySpellings() []string {
	out := make([]string, 0, len(reservedPrefixes)+len(reservedSuffixes)+2)
	for _, n := range append(reservedPrefixes[:len(reservedPrefixes):len(reservedPrefixes)], reservedSuffixes...) {
		out = append(out, n.spelling)
	}
	// The ends of the two forms that carry no leg suffix.
	return append(out, fulfilmentSuffix, fundingSuffix)
}

// ErrReservedKey is returned (as a *ReservedKeyError) for a key a caller
// or operator chose that spells a namespace the system derives its own
// keys in.
var ErrReservedKey = errors.New("wallet: idempotency key in a reserved namespace")

// ReservedKeyError names the reserved namespace a chosen key spells.
type ReservedKeyError struct {
	Key       string // as the caller spelled it
	Namespace string // the reserved prefix ("order:") or leg suffix (":settle")
	Use       string // what the system keeps it for
}

func (e *ReservedKeyError) Error() string {
	return fmt.Sprintf("wallet: key %q %s %q, a namespace reserved for %s: choose another key", e.Key, e.Where(), e.Namespace, e.Use)
}

// Where is "starts with" for a reserved prefix, "ends with" for a leg's
// suffix.
func (e *ReservedKeyError) Where() string {
	if strings.HasPrefix(e.Namespace, ":") {
		return "ends with"
	}
	return "starts with"
}

// Is makes errors.Is(err, ErrReservedKey) true.
func (e *ReservedKeyError) Is(target error) bool { return target == ErrReservedKey }

// reserved returns a *ReservedKeyError when key spells a reserved
// namespace, else nil.
func reserved(key string) error {
	for _, n := range reservedPrefixes {
		if strings.HasPrefix(key, n.spelling) {
			return &ReservedKeyError{Key: key, Namespace: n.spelling, Use: n.use}
		}
	}
	for _, n := range reservedSuffixes {
		if strings.HasSuffix(key, n.spelling) {
			return &ReservedKeyError{Key: key, Namespace: n.spelling, Use: n.use}
		}
	}
	return nil
}

// chosen is the refusal of a key a caller or operator chose, or nil.
func chosen(key string) error {
	if !validKey(key) {
		return ErrInvalidKey
	}
	return reserved(key)
}

// CallerKey is a key the caller chose itself (a seed, a benchmark, a
// test): any valid key outside the reserved namespaces. A post under one
// that spells a namespace is refused with a *ReservedKeyError.
func CallerKey(key string) Key { return Key{s: key, err: reserved(key)} }

// FulfilmentKey is the key of an order's Mana credit: whatever happens
// around it, one order mints at most once.
func FulfilmentKey(orderID int64) Key {
	return Key{s: orderPrefix + strconv.FormatInt(orderID, 10) + fulfilmentSuffix}
}

// FundingKey is the key of a Marquee's funding debit for day
// (YYYY-MM-DD): at most one debit per Marquee per service day, ever.
func FundingKey(marqueeID int64, day string) Key {
	return Key{s: marqueePrefix + strconv.FormatInt(marqueeID, 10) + ":" + day + fundingSuffix}
}

// maxReversalID bounds the provider's reversal id in a reversal key.
const maxReversalID = 160

// ReversalKey is the key of step (1, 2, ...) of a payment's reversals,
// taken for the provider's reversal id: the clawback's legs derive from
// it, and GivenBack is the Mana a won dispute returns.
func ReversalKey(paymentID, step int64, reversalID string) Key {
	if len(reversalID) > maxReversalID {
		reversalID = strings.ToValidUTF8(reversalID[:maxReversalID], "")
	}
	return Key{s: ReversalPrefix(paymentID) + strconv.FormatInt(step, 10) + ":" + reversalID}
}

// ReversalPrefix is the key prefix of every reversal step of payment
// paymentID (see ReversalKey).
func ReversalPrefix(paymentID int64) string {
	return paymentPrefix + strconv.FormatInt(paymentID, 10) + ":"
}

// GivenBack is the key of the Mana reversal step k gives back.
func (k Key) GivenBack() Key { return k.leg(givenBackSuffix) }

// Settlement is the key of the debt a Mana credit under k settles out of
// the wallet (CreditSettlingTx).
func (k Key) Settlement() Key { return k.leg(settleSuffix) }

// recovery is the key of the leg that recovers a write-off out of the
// Mana given back under back (a GivenBack key).
func (back Key) recovery() Key { return back.leg(writeOffSuffix) }

// APIKey is the key of the post an API request for player makes for
// purpose (conversion), derived from the request's Idempotency-Key so that
// every retry derives the same one. A client key that spells a reserved
// namespace is refused, like any caller's.
func APIKey(playerID int64, purpose, clientKey string) Key {
	return Key{s: scoped(apiPrefix+strconv.FormatInt(playerID, 10)+":"+purpose, clientKey), err: chosen(clientKey)}
}

// Operator purposes: each operator command posts in a namespace of its own.
const (
	OperatorAdjust  = "adjust"
	OperatorForgive = "forgive"
)

// OperatorKey is the key of an operator's post for purpose
// (OperatorAdjust, OperatorForgive, or a new command's own): stored as
// operator:<purpose>:<key>, a namespace no operator input can leave. An
// operator key that spells a reserved namespace is refused all the same, so
// that an operator who typed a system key learns it at once.
func OperatorKey(purpose, key string) Key {
	return Key{s: scoped(operatorPrefix+purpose, key), err: chosen(key)}
}

// maxScoped bounds an api or operator key before the legs derived from
// it, which the longest leg suffix then still fits beside.
const maxScoped = 200

// scoped is key inside namespace ns: ns:key, or ns/sha256:<hex> when that
// is longer than maxScoped. Migration 00011 spells the same rule in SQL.
func scoped(ns, key string) string {
	if s := ns + ":" + key; len(s) <= maxScoped {
		return s
	}
	sum := sha256.Sum256([]byte(key))
	return ns + hashedSeparator + hex.EncodeToString(sum[:])
}
