package provider

import "fmt"

// Registry holds the program's drivers, one per provider name. It is built
// once, at start-up, and read concurrently after.
type Registry struct {
	byName map[string]Provider
	names  []string
}

// NewRegistry returns a registry of drivers. Two drivers with one name, or
// a name that is not one of Names, are a wiring mistake: it panics, as
// http.ServeMux does for a pattern registered twice.
func NewRegistry(drivers ...Provider) *Registry {
	r := &Registry{byName: make(map[string]Provider, len(drivers))}
	for _, d := range drivers {
		name := d.Name()
		if !Known(name) {
			panic(fmt.Sprintf("provider: driver for unknown provider %q", name))
		}
		if _, dup := r.byName[name]; dup {
			panic(fmt.Sprintf("provider: two drivers for %q", name))
		}
		r.byName[name] = d
		r.names = append(r.names, name)
	}
	return r
}

// Get returns name's driver.
func (r *Registry) Get(name string) (Provider, bool) {
	if r == nil {
		return nil, false
	}
	p, ok := r.byName[name]
	return p, ok
}

// Names lists the registered providers, in registration order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return append([]string(nil), r.names...)
}

// Select returns every registered driver as T, the interface a consumer
// declares for what it uses, by name. A nil registry selects none.
func Select[T any](r *Registry) map[string]T {
	out := map[string]T{}
	if r == nil {
		return out
	}
	for name, p := range r.byName {
		if t, ok := any(p).(T); ok {
			out[name] = t
		}
	}
	return out
}
