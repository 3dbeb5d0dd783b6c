package integration_test

import (
	"slices"
	"strings"
	"testing"
)

// layer names the layer of a package of the module, by its path below the
// module (see docs/architecture.md): the driver contract, the core's
// helpers, the core, the stores, the recipes, the command, and the
// packages only tests import.
func layer(rel string) string {
	switch {
	case rel == "driver":
		return "driver"
	case rel == "":
		return "core"
	case strings.HasPrefix(rel, "internal/testing/"), rel == "drivertest":
		return "testing"
	case strings.HasPrefix(rel, "internal/"):
		return "helpers"
	case strings.HasPrefix(rel, "cmd/"):
		return "command"
	}
	switch strings.Split(rel, "/")[0] {
	case "fence", "fill", "job", "leader", "ratelimit":
		return "recipes"
	}
	return "stores"
}

// mayImport lists, for each layer, the layers its packages may import
// outside their own tests. Within the stores, a store package imports
// only its own subpackages, except quorum, which is built on redisdlock.
var mayImport = map[string][]string{
	"driver":  nil,
	"helpers": {"driver", "core", "helpers"},
	"core":    {"driver", "helpers"},
	"stores":  {"driver", "core", "helpers", "stores"},
	"recipes": {"driver", "core", "helpers"},
	"command": {"driver", "core", "helpers", "stores", "recipes", "command"},
	"testing": {"driver", "core", "helpers", "stores", "recipes", "command", "testing"},
}

// TestLayers checks that every package of the module imports only the
// layers below its own, so that the folder tree says who may import whom:
// no program's package imports a test server, the core and its helpers
// import no store, a recipe imports no store, and a store imports no other
// store (quorum's nodes are redisdlock's).
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/dlockhq/dlock"
	rel := func(p string) (string, bool) {
		if p == mod {
			return "", true
		}
		r, ok := strings.CutPrefix(p, mod+"/")
		return r, ok
	}
	for _, edge := range goList(t, "-f", `{{if eq .Module.Path "`+mod+`"}}{{range .Imports}}{{$.ImportPath}}>{{.}} {{end}}{{end}}`, mod+"/...") {
		pkg, imp, _ := strings.Cut(edge, ">")
		from, _ := rel(pkg)
		to, ours := rel(imp)
		if !ours {
			continue
		}
		lf, lt := layer(from), layer(to)
		allowed := slices.Contains(mayImport[lf], lt)
		if lf == "stores" && lt == "stores" {
			top := func(s string) string { return strings.Split(s, "/")[0] }
			allowed = top(from) == top(to) || from == "quorum" && to == "redisdlock"
		}
		if !allowed {
			t.Errorf("%s (%s) imports %s (%s)", pkg, lf, imp, lt)
		}
	}
}
