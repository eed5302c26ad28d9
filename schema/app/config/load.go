package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"slices"
	"strings"
)

// The files of an app directory, in the order they are read.
var fileOrder = []string{
	"app.toml", "inputs.toml", "secrets.toml", "sandbox.toml", "permissions.toml",
	"policies.toml", "break_glass.toml", "components/", "actions/", "installs/",
}

// topLevel are the single files an app directory may hold.
var topLevel = []string{"app.toml", "inputs.toml", "secrets.toml", "sandbox.toml", "permissions.toml", "policies.toml", "break_glass.toml"}

// dirs are the folders of one-file-per-item TOML files.
var dirs = []string{"components", "actions", "installs"}

// MaxFileBytes caps each file of an app config.
const MaxFileBytes = 1 << 20

// App is a parsed and validated app config.
type App struct {
	Metadata    Metadata
	Inputs      InputsFile
	Secrets     SecretsFile
	Sandbox     *Component
	Components  []*Component // sorted by name
	Actions     []*Action    // sorted by name
	Permissions Permissions
	Policies    PoliciesFile
	BreakGlass  BreakGlass
	Installs    []*InstallFile // sorted by name

	// Files holds every file of the config (TOML and the scripts and
	// policies they name), by slash-separated path: what a revision stores.
	Files map[string][]byte

	// lines maps file -> key path -> line.
	lines map[string]map[string]int
	// origin maps a component, action or install name to its file.
	origin map[string]string
	// graph is the component graph, built once (references are parsed
	// to find implied dependencies).
	graph *Graph
}

// LoadDir reads and validates the app config in directory dir.
func LoadDir(dir string, opts Options) (*App, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("app config: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("app config: %s is not a directory", dir)
	}
	return Load(os.DirFS(dir), opts)
}

// Load reads and validates the app config in fsys. On any problem it
// returns an *Error listing all of them.
func Load(fsys fs.FS, opts Options) (*App, error) {
	files, err := readFiles(fsys)
	if err != nil {
		return nil, err
	}
	return Parse(files, opts)
}

// readFiles reads every regular file of the config, skipping hidden files
// and folders (.git and editor files).
func readFiles(fsys fs.FS) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxFileBytes {
			return fmt.Errorf("app config: %s is %d bytes; files may be at most %d", p, info.Size(), MaxFileBytes)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[p] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("app config: %w", err)
	}
	return files, nil
}

// Parse validates an app config given as its files, by slash-separated
// path relative to the app directory.
func Parse(files map[string][]byte, opts Options) (*App, error) {
	a := &App{Files: files, lines: map[string]map[string]int{}, origin: map[string]string{}}
	ds := &diags{}
	if _, ok := files["app.toml"]; !ok {
		ds.addf("app.toml", 0, "", "every app directory has one, with at least name = \"...\"", "is missing")
	}
	// Unknown TOML files are mistakes too: a typo would otherwise be
	// silently left out of the app.
	for _, p := range sortedKeys(files) {
		if !strings.HasSuffix(p, ".toml") {
			continue
		}
		dir, base := path.Split(p)
		switch {
		case dir == "" && slices.Contains(topLevel, base):
		case dir != "" && slices.Contains(dirs, strings.TrimSuffix(dir, "/")):
		case dir == "":
			hint := didYouMean(base, topLevel)
			if hint == "" {
				hint = "an app directory holds " + strings.Join(topLevel, ", ") + " and the folders components/, actions/ and installs/"
			}
			ds.addf(p, 0, "", hint, "is not a file byoc reads")
		default:
			top, _, _ := strings.Cut(dir, "/")
			hint := didYouMean(top, dirs)
			if hint == "" {
				hint = "TOML files go in components/, actions/ or installs/, one level deep"
			}
			ds.addf(p, 0, "", hint, "is not in a folder byoc reads")
		}
	}
	decodeFile := func(name string, dst any) bool {
		b, ok := files[name]
		if !ok {
			return false
		}
		root, d := parseTOML(name, b)
		if d != nil {
			ds.add(*d)
			return false
		}
		dec := &decoder{file: name, ds: ds, lines: map[string]int{}}
		a.lines[name] = dec.lines
		dec.decodeStruct("", &value{kind: kTable, line: 1, table: root}, reflect.ValueOf(dst).Elem())
		return true
	}
	decodeFile("app.toml", &a.Metadata)
	decodeFile("inputs.toml", &a.Inputs)
	decodeFile("secrets.toml", &a.Secrets)
	var sb Component
	if decodeFile("sandbox.toml", &sb) {
		if sb.Name != "" && sb.Name != "sandbox" {
			ds.addf("sandbox.toml", a.line("sandbox.toml", "name"), "name", "leave it out", "the sandbox is always named \"sandbox\", not %q", sb.Name)
		}
		sb.Name = "sandbox"
		a.Sandbox = &sb
	}
	decodeFile("permissions.toml", &a.Permissions)
	decodeFile("policies.toml", &a.Policies)
	decodeFile("break_glass.toml", &a.BreakGlass)
	a.Components = loadDir(a, ds, files, "components", "component", decodeFile, func(c *Component) *string { return &c.Name })
	a.Actions = loadDir(a, ds, files, "actions", "action", decodeFile, func(c *Action) *string { return &c.Name })
	a.Installs = loadDir(a, ds, files, "installs", "install", decodeFile, func(c *InstallFile) *string { return &c.Name })
	a.Graph()
	a.validate(ds, opts)
	if err := ds.err(); err != nil {
		return nil, err
	}
	return a, nil
}

// loadDir decodes the one-item-per-file TOML files of a folder, naming
// each item after its file unless it has a name, sorted by name.
func loadDir[T any](a *App, ds *diags, files map[string][]byte, dir, kind string, decode func(string, any) bool, name func(*T) *string) []*T {
	var out []*T
	for _, p := range inDir(files, dir) {
		item := new(T)
		if !decode(p, item) {
			continue
		}
		if n := name(item); *n == "" {
			*n = stem(p)
		}
		out = append(out, item)
		a.addOrigin(ds, kind, *name(item), p)
	}
	sortByName(out, func(x *T) string { return *name(x) })
	return out
}

// addOrigin remembers which file defined a name, reporting a name that two
// files define.
func (a *App) addOrigin(ds *diags, kind, name, file string) {
	k := kind + "/" + name
	if prev, ok := a.origin[k]; ok {
		ds.addf(file, a.line(file, "name"), "name", "names must be unique; rename one of them", "%s %q is also defined in %s", kind, name, prev)
		return
	}
	a.origin[k] = file
}

// fileOf returns the file that defined a component, action or install.
// FileOf returns the file a component, action or install was read from
// (kind "component", "action" or "install").
func (a *App) FileOf(kind, name string) string { return a.fileOf(kind, name) }

func (a *App) fileOf(kind, name string) string {
	return a.origin[kind+"/"+name]
}

// line returns the line of a key path in a file, or of its closest
// recorded parent, or 0.
func (a *App) line(file, key string) int {
	m := a.lines[file]
	for key != "" {
		if l, ok := m[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func inDir(files map[string][]byte, dir string) []string {
	var out []string
	for p := range files {
		d, base := path.Split(p)
		if d == dir+"/" && strings.HasSuffix(base, ".toml") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func stem(p string) string { return strings.TrimSuffix(path.Base(p), ".toml") }

func sortByName[T any](s []T, name func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(name(a), name(b)) })
}

// Digest is the SHA-256 of an app config's files: their paths and
// contents, in path order.
func Digest(files map[string][]byte) string {
	h := sha256.New()
	for _, p := range sortedKeys(files) {
		fmt.Fprintf(h, "%d:%s\n%d:", len(p), p, len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
