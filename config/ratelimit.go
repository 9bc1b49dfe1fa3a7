package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultRateLimit is generous: far above what one player's clients send
// in normal use, low enough that one player cannot hold more than a few of
// the web process's database connections.
const DefaultRateLimit = "200/s burst 400 concurrent 8"

// RateLimit is rate_limit as parsed: a token bucket of PerSecond requests
// a second on average and Burst at once (PerSecond 0: none), and at most
// Concurrent requests in flight (0: unbounded), per player. The zero value
// is "off". What the API does with it is package httpapi's RateLimit.
type RateLimit struct {
	PerSecond  float64
	Burst      int
	Concurrent int
}

// ParseRateLimit reads BILLING_RATE_LIMIT: "off", or "<n>/s" or "<n>/m"
// optionally followed by "burst <n>" (default: one second's worth, at
// least 1) and "concurrent <n>" (default: unbounded), e.g.
// "200/s burst 400 concurrent 8".
func ParseRateLimit(s string) (RateLimit, error) {
	fields := strings.Fields(strings.ToLower(s))
	if len(fields) == 1 && fields[0] == "off" {
		return RateLimit{}, nil
	}
	if len(fields) == 0 || len(fields)%2 == 0 {
		return RateLimit{}, fmt.Errorf("want \"off\" or e.g. \"200/s burst 400 concurrent 8\", got %q", s)
	}
	var rl RateLimit
	var err error
	if rl.PerSecond, err = parseRate(fields[0]); err != nil {
		return RateLimit{}, err
	}
	rl.Burst = max(1, int(rl.PerSecond))
	for i := 1; i < len(fields); i += 2 {
		n, err := strconv.Atoi(fields[i+1])
		if err != nil || n <= 0 {
			return RateLimit{}, fmt.Errorf("%s wants a positive integer, got %q", fields[i], fields[i+1])
		}
		switch fields[i] {
		case "burst":
			rl.Burst = n
		case "concurrent":
			rl.Concurrent = n
		default:
			return RateLimit{}, fmt.Errorf("unknown word %q (want burst or concurrent)", fields[i])
		}
	}
	return rl, nil
}

// parseRate reads "<n>/s" or "<n>/m" as requests per second.
func parseRate(s string) (float64, error) {
	num, unit, ok := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || n <= 0 || n > 1e6 {
		return 0, errors.New("the rate wants a positive number per second or minute, such as 200/s or 60/m")
	}
	switch unit {
	case "s":
		return n, nil
	case "m":
		return n / 60, nil
	}
	return 0, fmt.Errorf("the rate's unit must be /s or /m, got /%s", unit)
}
