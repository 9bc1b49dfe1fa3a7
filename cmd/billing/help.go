package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// plainBoolUsage makes every command's help list a boolean flag as
// "--json", not "--json[=true|false]": pflag spells out the optional value
// of any flag whose value is a bool flag, and every boolean here is used
// bare. It replaces the flag sections of the usage template (inherited by
// every subcommand) with a rendering through plainBools.
func plainBoolUsage(root *cobra.Command) {
	tmpl := strings.NewReplacer(
		"{{.LocalFlags.FlagUsages", "{{plainFlagUsages .LocalFlags",
		"{{.InheritedFlags.FlagUsages", "{{plainFlagUsages .InheritedFlags",
	).Replace(root.UsageTemplate())
	root.SetUsageTemplate(tmpl)
}

// cobra's template functions are one global map: the function is added
// once, before any command exists, not by every root built (the tests
// build many at once).
func init() {
	cobra.AddTemplateFunc("plainFlagUsages", func(fs *pflag.FlagSet) string { return plainBools(fs).FlagUsages() })
}

// plainBools is a copy of fs, for rendering only, whose boolean values no
// longer announce themselves as bool flags: pflag then prints the name
// alone (their NoOptDefVal, "true", is the default it leaves unsaid).
func plainBools(fs *pflag.FlagSet) *pflag.FlagSet {
	out := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	out.SortFlags = fs.SortFlags
	fs.VisitAll(func(f *pflag.Flag) {
		c := *f
		if f.Value.Type() == "bool" {
			c.Value = usageOnly{f.Value}
		}
		out.AddFlag(&c)
	})
	return out
}

// usageOnly hides a value's IsBoolFlag from pflag's usage rendering.
type usageOnly struct{ v pflag.Value }

func (u usageOnly) String() string     { return u.v.String() }
func (u usageOnly) Set(s string) error { return u.v.Set(s) }
func (u usageOnly) Type() string       { return u.v.Type() }
