package timeline

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// zeroDecimal are the ISO 4217 currencies whose minor unit is the unit
// (providers send their amounts as is).
var zeroDecimal = map[string]bool{"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
	"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true,
	"xof": true, "xpf": true}

// money spells minor units of a provider currency: "9.99 USD".
func money(amount int64, currency string) string {
	cur := strings.ToUpper(currency)
	if zeroDecimal[strings.ToLower(currency)] {
		return strconv.FormatInt(amount, 10) + " " + cur
	}
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, amount/100, amount%100, cur)
}

// units spells an in-app amount: "1000 Mana", "5 Sparks".
func units(n int64, currency string) string {
	return strconv.FormatInt(n, 10) + " " + inApp(currency)
}

// signed is units with its sign: "+1000 Mana", "-501 Mana".
func signed(n int64, currency string) string {
	if n > 0 {
		return "+" + units(n, currency)
	}
	return units(n, currency)
}

func inApp(currency string) string {
	switch currency {
	case "mana":
		return "Mana"
	case "sparks":
		return "Sparks"
	}
	return currency
}

// minute is how the verdict spells a moment.
func minute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// stamp is how a line spells a moment.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") }

// plural is n followed by word, made plural when n is not 1.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	if w, ok := strings.CutSuffix(word, "ery"); ok {
		return strconv.Itoa(n) + " " + w + "eries"
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// titled capitalizes s's first letter.
func titled(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
