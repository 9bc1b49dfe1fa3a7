package devreceiver

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
)

// list serves the kept deliveries, newest first: an HTML page, or JSON
// with ?format=json.
func (r *Receiver) list(w http.ResponseWriter, req *http.Request) {
	deliveries := r.Deliveries()
	w.Header().Set("Cache-Control", "no-store")
	if req.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"endpoint": Path, "deliveries": deliveries})
		return
	}
	// Everything shown is escaped by html/template; the policy also keeps
	// any script a delivery might carry from running.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTemplate.Execute(w, map[string]any{"Path": Path, "Deliveries": deliveries, "Keep": r.opts.Keep})
}

// indent is a body as indented JSON for reading, or as it came when it is
// not JSON.
func indent(body string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(body), "", "  ") != nil {
		return body
	}
	return b.String()
}

var pageTemplate = template.Must(template.New("events").Funcs(template.FuncMap{"indent": indent}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>billing dev · events received</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:.3em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.bad{color:#b00020;font-weight:bold}.ok{color:#1b5e20}.mark{background:#fff3c4;padding:0 .3em}pre{white-space:pre-wrap;max-width:60em}</style></head>
<body>
<h1>Events received</h1>
<p>billing dev's local webhook endpoint (<code>POST {{.Path}}</code>). Each delivery is verified with the Go SDK
(<code>fibe.NewWebhookVerifier</code>) under the endpoint's secret. Delivery is at least once and in no promised order:
a <span class="mark">duplicate</span> is a webhook-id that arrived before (a consumer applies it once), a
<span class="mark">stale</span> one has a sequence below one already received for its player (a consumer drops it).
The newest {{.Keep}} are kept, newest first; reload for more. JSON: <a href="?format=json">?format=json</a>.</p>
{{if not .Deliveries}}<p id="empty">Nothing received yet: buy something (a checkout) and its events arrive here.</p>{{else}}
<table id="deliveries"><tr><th>Received (UTC)</th><th>webhook-id</th><th>Type</th><th>Player</th><th>Sequence</th><th>Signature</th><th></th></tr>
{{range .Deliveries}}<tr class="delivery">
<td>{{.ReceivedAt.Format "2006-01-02 15:04:05"}}</td><td><code>{{.WebhookID}}</code></td><td>{{.Type}}</td>
<td>{{if .PlayerID}}{{.PlayerID}}{{end}}</td><td>{{if .Sequence}}{{.Sequence}}{{end}}</td>
<td>{{if .Verified}}<span class="ok">verified</span>{{else}}<span class="bad">NOT verified</span>: {{.Error}}{{end}}</td>
<td>{{if .Duplicate}}<span class="mark duplicate">duplicate</span> {{end}}{{if .Stale}}<span class="mark stale">stale</span>{{end}}</td>
</tr><tr><td colspan="7"><details><summary>body</summary><pre>{{indent .Body}}</pre></details></td></tr>
{{end}}</table>{{end}}
</body></html>`))
