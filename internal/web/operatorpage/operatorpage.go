// Package operatorpage serves the operator page of `billing web`: the
// payment timeline of package timeline as plain server-rendered HTML (no
// script; a GET form searches), with the unapplied payments and the open
// debts beside it. It only reads. The caller mounts it behind the River
// UI's credentials and cross-site guard (package httpapi).
package operatorpage

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/provider"
)

// Path is where the page is served; every route of it is under Path.
const Path = "/timeline/"

// listLimit bounds the unapplied payments and open debts listed.
const listLimit = 50

// Options configure Handler.
type Options struct {
	DB     dbtx.DB // a pool: each timeline reads one snapshot
	Logger *slog.Logger
	// RiverUI is the River UI's prefix that job links point into.
	RiverUI string
	// Providers are the drivers, asked for their facts: which provider an
	// id's prefix names, the key each sent with its checkouts.
	Providers *provider.Registry
}

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"orderURL":   orderURL,
	"playerURL":  playerURL,
	"paymentURL": paymentURL,
	"lower":      strings.ToLower,
}).Parse(pageHTML))

// styleHash lets the Content-Security-Policy allow the page's one inline
// style sheet and nothing else: no script, no other origin.
var styleHash = func() string {
	sum := sha256.Sum256([]byte(pageCSS))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

type handler struct{ opts Options }

// Handler serves the page: GET Path (the search and the lists),
// Path+"order/{id}", Path+"player/{id}" (?since=) and
// Path+"payment/{provider}/{id}". Any other method is 405.
func Handler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RiverUI == "" {
		opts.RiverUI = "/riverui"
	}
	h := &handler{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path+"{$}", h.search)
	mux.HandleFunc("GET "+Path+"order/{id}", h.order)
	mux.HandleFunc("GET "+Path+"player/{id}", h.player)
	mux.HandleFunc("GET "+Path+"payment/{provider}/{id}", h.payment)
	mux.HandleFunc("GET "+strings.TrimSuffix(Path, "/"), func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	})
	return mux
}

func orderURL(id int64) string  { return Path + "order/" + strconv.FormatInt(id, 10) }
func playerURL(id int64) string { return Path + "player/" + strconv.FormatInt(id, 10) }
func paymentURL(provider, id string) string {
	return Path + "payment/" + url.PathEscape(provider) + "/" + url.PathEscape(id)
}

func (h *handler) order(w http.ResponseWriter, r *http.Request) {
	id, ok := positive(r.PathValue("id"))
	if !ok {
		h.render(w, r, http.StatusNotFound, &view{Message: "An order id is a positive number."})
		return
	}
	h.show(w, r, func(ctx context.Context) (*timeline.Timeline, error) {
		return timeline.Order(ctx, h.opts.DB, h.opts.Providers, id)
	})
}

func (h *handler) player(w http.ResponseWriter, r *http.Request) {
	id, ok := positive(r.PathValue("id"))
	since, err := parseSince(r.URL.Query().Get("since"))
	if !ok || err != nil {
		h.render(w, r, http.StatusBadRequest, &view{Message: "A player id is a positive number; since is a date (2026-11-01) or a time."})
		return
	}
	h.show(w, r, func(ctx context.Context) (*timeline.Timeline, error) {
		return timeline.Player(ctx, h.opts.DB, h.opts.Providers, id, since)
	})
}

func (h *handler) payment(w http.ResponseWriter, r *http.Request) {
	provider, id := r.PathValue("provider"), r.PathValue("id")
	h.show(w, r, func(ctx context.Context) (*timeline.Timeline, error) {
		return timeline.Payment(ctx, h.opts.DB, h.opts.Providers, provider, id)
	})
}

// show renders the timeline load returns, or what kept it from loading.
func (h *handler) show(w http.ResponseWriter, r *http.Request, load func(context.Context) (*timeline.Timeline, error)) {
	tl, err := load(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, &view{Timeline: tl, Rows: rows(tl, h.opts.RiverUI)})
}

// message is the error without its package's prefix (sentinel).
func message(err, sentinel error) string {
	msg := err.Error()
	if i := strings.Index(msg, sentinel.Error()+": "); i >= 0 {
		msg = msg[i+len(sentinel.Error())+2:]
	}
	return titled(msg) + "."
}

// fail answers what kept a timeline from loading: nothing known (404), an
// id no provider sends (400, the operator's input), else the database's
// failure (500, logged).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, timeline.ErrNotFound):
		h.render(w, r, http.StatusNotFound, &view{Message: message(err, timeline.ErrNotFound)})
	case errors.Is(err, timeline.ErrInvalidID):
		h.render(w, r, http.StatusBadRequest, &view{Message: message(err, timeline.ErrInvalidID)})
	default:
		h.opts.Logger.ErrorContext(r.Context(), "operator page failed", "path", r.URL.Path, "error", err)
		h.render(w, r, http.StatusInternalServerError, &view{Message: "The database could not be read; try again (the error is logged)."})
	}
}

// render writes the page with v and the operator's lists.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, v *view) {
	ctx := r.Context()
	var err error
	if v.Unapplied, err = timeline.Unapplied(ctx, h.opts.DB, listLimit); err == nil {
		v.Debts, err = timeline.OpenDebts(ctx, h.opts.DB, listLimit)
	}
	if err != nil {
		h.opts.Logger.WarnContext(ctx, "operator page: lists", "error", err)
		v.ListsError = true
	}
	v.CSS, v.RiverUI, v.Path, v.AsOf = template.CSS(pageCSS), h.opts.RiverUI, Path, time.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	v.form(r)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src "+styleHash+"; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	if err := page.Execute(w, v); err != nil {
		h.opts.Logger.WarnContext(ctx, "operator page: render", "error", err)
	}
}

func positive(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == s
}

// parseSince reads the player page's since: empty, a date or an RFC 3339
// time (the form's date field sends a date).
func parseSince(s string) (time.Time, error) {
	if s = strings.TrimSpace(s); s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}

func titled(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// providers is the order a provider id is tried in: the ones its prefix
// names first (the drivers' facts say), then the rest.
func providers(reg *provider.Registry, id string) []string {
	out := reg.ProvidersOf(id)
	for _, p := range reg.Names() {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
