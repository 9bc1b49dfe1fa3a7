// Package api holds billing's OpenAPI 3.1 document (openapi.yaml): the
// contract of the /v1 API and the webhook intake, embedded so that the
// server serves the same document the tests check every answer against.
package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"go.yaml.in/yaml/v3"
)

// YAML is the document as written.
//
//go:embed openapi.yaml
var YAML []byte

// JSON is the document as JSON (converted once, on first use).
func JSON() ([]byte, error) { return jsonOnce() }

var jsonOnce = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(YAML, &doc); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	b, err := json.Marshal(jsonable(doc))
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml to JSON: %w", err)
	}
	return b, nil
})

// jsonable turns YAML's maps with non-string keys into JSON objects.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
		return v
	}
	return v
}
