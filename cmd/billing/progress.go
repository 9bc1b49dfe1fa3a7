package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressLine redraws one status line, with rate and ETA, on a terminal and
// stays silent otherwise, so logs and pipes get only the line-oriented report.
type progressLine struct {
	w          io.Writer // nil when not a terminal
	drawn      bool
	stage      string
	stageStart time.Time
	now        func() time.Time
}

func progressTo(w io.Writer) *progressLine {
	p := &progressLine{now: time.Now}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.w = w
		}
	}
	return p
}

// show draws "stage: done/total  rate/s  ETA"; total <= 0 means unknown.
func (p *progressLine) show(stage string, done, total int64) {
	if p.w == nil {
		return
	}
	fmt.Fprint(p.w, "\r\033[K"+p.format(stage, done, total))
	p.drawn = true
}

func (p *progressLine) format(stage string, done, total int64) string {
	if stage != p.stage {
		p.stage, p.stageStart = stage, p.now()
	}
	line := fmt.Sprintf("%s: %d", stage, done)
	if total > 0 {
		line += fmt.Sprintf("/%d (%d%%)", total, done*100/total)
	}
	elapsed := p.now().Sub(p.stageStart).Seconds()
	if elapsed <= 0 || done == 0 {
		return line
	}
	rate := float64(done) / elapsed
	line += fmt.Sprintf("  %.0f/s", rate)
	if total > done {
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		line += "  ETA " + eta.Round(time.Second).String()
	}
	return line
}

func (p *progressLine) clear() {
	if p.w != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}
