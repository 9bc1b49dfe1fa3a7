package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// probe measures when writes are acknowledged again after a fault: every
// probeEvery it sends a new signed Stripe event that billing claims and
// acknowledges without a job (a write whose commit waits for the
// standby), to a random web process, without waiting for the ones still
// in flight. Every acknowledged probe event is an acknowledged effect the
// checks look for on the final primary.
type probe struct {
	run    *Run
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	sends []probeSend
	acked []string // event ids answered 2xx
}

type probeSend struct {
	start, end time.Time
	status     int // 0: no answer
}

const (
	probeEvery   = 100 * time.Millisecond
	probeTimeout = 5 * time.Second
)

func startProbe(ctx context.Context, r *Run) *probe {
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{run: r, cancel: cancel}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		hc := &http.Client{Timeout: probeTimeout}
		for n := 0; ctx.Err() == nil; n++ {
			id := fmt.Sprintf("evt_probe_%d_%d", r.opts.Seed, n)
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.send(hc, id) }()
			sleepCtx(ctx, probeEvery)
		}
	}()
	return p
}

func (p *probe) stop() {
	p.cancel()
	p.wg.Wait()
}

func (p *probe) send(hc *http.Client, id string) {
	webs := p.run.liveWebAddrs()
	if len(webs) == 0 {
		return
	}
	body := []byte(`{"id":"` + id + `","object":"event","type":"customer.created","data":{"object":{"id":"cus_probe"}}}`)
	s := probeSend{start: time.Now()}
	header, value, err := providerevents.Sign("stripe", p.run.secrets["stripe"], body, s.start)
	if err != nil {
		return
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+webs[rand.IntN(len(webs))]+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set(header, value)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s.status = resp.StatusCode
	}
	s.end = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sends = append(p.sends, s)
	if s.status/100 == 2 {
		p.acked = append(p.acked, id)
	}
}

// writesBack waits for the first probe sent after at to be acknowledged
// and returns how long after at its answer came.
func (p *probe) writesBack(ctx context.Context, at time.Time) (time.Duration, error) {
	for {
		p.mu.Lock()
		var first time.Time
		for _, s := range p.sends {
			if s.status/100 == 2 && !s.start.Before(at) && (first.IsZero() || s.end.Before(first)) {
				first = s.end
			}
		}
		p.mu.Unlock()
		if !first.IsZero() {
			return first.Sub(at), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(at), fmt.Errorf("no write acknowledged %v after the fault: %w", time.Since(at).Round(time.Second), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ackedEvents are the probe events billing acknowledged.
func (p *probe) ackedEvents() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.acked...)
}

// get fetches url's body; an answer other than 200 is an error.
func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return string(b), err
}

// sampleValue is the value of one line of the Prometheus text format.
func sampleValue(line string) int64 {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return 0
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return 0
	}
	return int64(v)
}
