package enforcer

import (
	"errors"
	"fmt"
	"time"
)

// DayLayout is how a service day is written: YYYY-MM-DD.
const DayLayout = "2006-01-02"

// ErrInvalidDay is returned for a day that is not YYYY-MM-DD.
var ErrInvalidDay = errors.New("enforcer: invalid service day")

// ServiceDay names the service day that contains t in tz.
func ServiceDay(t time.Time, tz *time.Location) string {
	return t.In(tz).Format(DayLayout)
}

// DayBounds returns the first instant of day in tz and the first instant of
// the next day (the end, exclusive): local midnights, so the span is 23 or
// 25 hours on daylight-saving change days.
func DayBounds(day string, tz *time.Location) (start, end time.Time, err error) {
	d, err := time.ParseInLocation(DayLayout, day, tz)
	if err != nil || d.Format(DayLayout) != day {
		return time.Time{}, time.Time{}, fmt.Errorf("%w: %q", ErrInvalidDay, day)
	}
	y, m, dd := d.Date()
	// time.Date normalises day+1 across month and year ends, and picks the
	// local midnight's offset, which is what makes DST days 23 or 25 hours.
	return time.Date(y, m, dd, 0, 0, 0, 0, tz), time.Date(y, m, dd+1, 0, 0, 0, 0, tz), nil
}

// EndOfServiceDay is the end (exclusive) of the service day containing t.
func EndOfServiceDay(t time.Time, tz *time.Location) time.Time {
	y, m, d := t.In(tz).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, tz)
}
