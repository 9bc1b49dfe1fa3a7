// Package strictjson is the one JSON reader of every body billing accepts:
// API requests and provider webhooks. It refuses what two readers could
// read differently rather than guess: invalid UTF-8, a member name that
// appears twice in any object (also inside values nobody reads), and a
// member that matches a field only when names are compared without case
// ("ID" beside, or instead of, "id"). Names are matched exactly.
package strictjson

import (
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Errors, each wrapped with the decoder's detail. Compare with errors.Is.
var (
	ErrInvalidUTF8   = errors.New("strictjson: not valid UTF-8")
	ErrSyntax        = errors.New("strictjson: not valid JSON")
	ErrDuplicateName = errors.New("strictjson: duplicate member name")
	ErrCaseVariant   = errors.New("strictjson: member name differs from a field only by case")
	ErrUnknownName   = errors.New("strictjson: unknown member")
	ErrType          = errors.New("strictjson: value of the wrong type")
)

// Options choose what else is refused.
type Options struct {
	// RejectUnknown refuses members dst has no field for (API bodies);
	// without it they are skipped, still checked for duplicates (provider
	// events carry far more than we read).
	RejectUnknown bool
}

// Unmarshal decodes body into dst under the rules above. dst is left
// partly written on error.
func Unmarshal(body []byte, dst any, o Options) error {
	if !utf8.Valid(body) {
		return ErrInvalidUTF8
	}
	if err := jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(o.RejectUnknown)); err != nil {
		return classify(body, err)
	}
	if o.RejectUnknown {
		return nil // every member matched a field exactly: no variant left
	}
	// Read again matching names without case: a member that only this
	// reading takes (or that collides with its exact twin) is ambiguous.
	again := reflect.New(reflect.TypeOf(dst).Elem())
	err := jsonv2.Unmarshal(body, again.Interface(), jsonv2.MatchCaseInsensitiveNames(true))
	if err != nil || !reflect.DeepEqual(again.Elem().Interface(), reflect.ValueOf(dst).Elem().Interface()) {
		return fmt.Errorf("%w: %v", ErrCaseVariant, cmpErr(err))
	}
	return nil
}

func cmpErr(err error) any {
	if err != nil {
		return err
	}
	return "a member would be read differently"
}

// classify wraps a decoder's error in one of the package's errors.
func classify(body []byte, err error) error {
	var semErr *jsonv2.SemanticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		return fmt.Errorf("%w: %v", ErrDuplicateName, err)
	case errors.Is(err, jsonv2.ErrUnknownName):
		return fmt.Errorf("%w (names are case-sensitive): %v", ErrUnknownName, err)
	case !jsontext.Value(body).IsValid():
		// Malformed input is malformed, whatever type error came first.
		return fmt.Errorf("%w: %v", ErrSyntax, err)
	case errors.As(err, &semErr):
		return fmt.Errorf("%w: %w", ErrType, err)
	}
	return fmt.Errorf("%w: %v", ErrSyntax, err)
}
