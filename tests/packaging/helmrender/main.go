// helmrender renders a Helm chart the way `helm template` does, with the same engine: Go's
// text/template, the sprig function library, sigs.k8s.io/yaml and, for values.schema.json,
// gojsonschema, all from Debian's Go packages (GOPATH mode, GO111MODULE=off). It exists because
// helm itself cannot be installed here; it covers what iscsigw's chart uses and fails on anything
// else, so the chart stays within what it checks.
//
// Covered: Chart.yaml as .Chart (Name, Version, AppVersion, ...), values.yaml merged with -f
// files (maps deep-merged, a null deletes a key, as Helm coalesces), the merged values validated
// against values.schema.json, .Release (Name, Namespace, Service, IsInstall, IsUpgrade,
// Revision), .Capabilities (KubeVersion, APIVersions.Has), .Template (Name, BasePath), .Files.Get,
// sprig's functions without env/expandenv, and Helm's toYaml, fromYaml, toJson, fromJson,
// include, tpl, required and lookup (empty, as in helm template; with -cluster FILE, the objects
// of that YAML list, as `helm install` sees a live cluster's). Templates named _* are partials;
// NOTES.txt is rendered to -notes. -strict makes a missing value an error (helm lint --strict).
//
//	go run main.go -chart helm/iscsigw [-f values.yaml ...] [-name R] [-namespace N] [-strict]
//	               [-notes FILE] [-cluster objects.yaml] > rendered.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

// Chart mirrors the Chart.yaml fields Helm exposes as .Chart (capitalised).
type Chart struct {
	APIVersion  string            `json:"apiVersion"`
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	AppVersion  string            `json:"appVersion"`
	KubeVersion string            `json:"kubeVersion"`
	Description string            `json:"description"`
	Type        string            `json:"type"`
	Keywords    []string          `json:"keywords"`
	Home        string            `json:"home"`
	Sources     []string          `json:"sources"`
	Icon        string            `json:"icon"`
	Annotations map[string]string `json:"annotations"`
	Maintainers []struct {
		Name  string `json:"name"`
		Email string `json:"email"`
		URL   string `json:"url"`
	} `json:"maintainers"`
}

type Release struct {
	Name      string
	Namespace string
	Service   string
	IsInstall bool
	IsUpgrade bool
	Revision  int
}

type KubeVersion struct{ Version, Major, Minor string }

func (k KubeVersion) String() string { return k.Version }

type APIVersions []string

// Has reports whether an API group/version (or group/version/Kind) is known, as Helm's does.
func (a APIVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions APIVersions
}

type TemplateInfo struct{ Name, BasePath string }

type Files map[string][]byte

func (f Files) Get(name string) string { return string(f[name]) }

func readYAML(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, nil
}

// merge overlays src onto dst like Helm's coalescing of user values over chart defaults.
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = merge(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

type renderer struct {
	tmpl    *template.Template
	strict  bool
	cluster []map[string]interface{} // what lookup finds (-cluster)
}

// lookup answers as Helm's does for one named object: the object, or an empty map when the
// cluster has none of that apiVersion, kind, namespace and name. A list (name "") is not covered.
func (r *renderer) lookup(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
	if name == "" {
		return nil, errors.New("lookup of a list is not covered by helmrender")
	}
	for _, o := range r.cluster {
		meta, _ := o["metadata"].(map[string]interface{})
		ns, _ := meta["namespace"].(string)
		if o["apiVersion"] == apiVersion && o["kind"] == kind && meta["name"] == name &&
			ns == namespace {
			return o, nil
		}
	}
	return map[string]interface{}{}, nil
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	// Helm removes these: a chart must render the same everywhere.
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["lookup"] = r.lookup
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := r.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := r.tmpl.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	return f
}

func validateSchema(schemaFile string, values map[string]interface{}) error {
	schema, err := os.ReadFile(schemaFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema),
		gojsonschema.NewGoLoader(values))
	if err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	if !res.Valid() {
		var b strings.Builder
		b.WriteString("values don't meet the specifications of the schema(s):")
		for _, e := range res.Errors() {
			b.WriteString("\n- " + e.String())
		}
		return errors.New(b.String())
	}
	return nil
}

func run() error {
	var files valueFiles
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "iscsigw", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kube := flag.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
	apis := flag.String("api-versions", "", "extra API versions for .Capabilities.APIVersions")
	strict := flag.Bool("strict", false, "a missing value is an error")
	notes := flag.String("notes", "", "write the rendered NOTES.txt here")
	clusterFile := flag.String("cluster", "", "YAML list of the objects lookup finds")
	flag.Var(&files, "f", "values file (repeatable; later files win)")
	flag.Parse()
	if *chartDir == "" {
		return errors.New("-chart is required")
	}

	var chart Chart
	data, err := os.ReadFile(filepath.Join(*chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, &chart); err != nil {
		return fmt.Errorf("Chart.yaml: %w", err)
	}
	if chart.APIVersion != "v2" || chart.Name == "" || chart.Version == "" {
		return errors.New("Chart.yaml: apiVersion v2, name and version are required")
	}

	values, err := readYAML(filepath.Join(*chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		v, err := readYAML(f)
		if err != nil {
			return err
		}
		values = merge(values, v)
	}
	if err := validateSchema(filepath.Join(*chartDir, "values.schema.json"), values); err != nil {
		return err
	}

	apiVersions := APIVersions{"v1", "apps/v1", "networking.k8s.io/v1", "policy/v1"}
	for _, a := range strings.Split(*apis, ",") {
		if a != "" {
			apiVersions = append(apiVersions, a)
		}
	}
	kv := strings.SplitN(strings.TrimPrefix(*kube, "v"), ".", 3)
	if len(kv) < 2 {
		return fmt.Errorf("-kube-version %q: want vMAJOR.MINOR.PATCH", *kube)
	}

	// Every file of templates/ is one named template "<chart>/templates/<file>", as in Helm.
	r := &renderer{strict: *strict}
	if *clusterFile != "" {
		data, err := os.ReadFile(*clusterFile)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(data, &r.cluster); err != nil {
			return fmt.Errorf("-cluster %s: %w", *clusterFile, err)
		}
	}
	r.tmpl = template.New(chart.Name)
	if *strict {
		r.tmpl.Option("missingkey=error")
	} else {
		r.tmpl.Option("missingkey=zero")
	}
	r.tmpl.Funcs(r.funcs())
	allFiles := Files{}
	var names []string
	err = filepath.Walk(*chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(*chartDir, p)
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		allFiles[filepath.ToSlash(rel)] = body
		if strings.HasPrefix(filepath.ToSlash(rel), "templates/") {
			tname := path.Join(chart.Name, filepath.ToSlash(rel))
			if _, err := r.tmpl.New(tname).Parse(string(body)); err != nil {
				return err
			}
			names = append(names, tname)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)

	top := map[string]interface{}{
		"Chart":  chart,
		"Values": values,
		"Release": Release{Name: *name, Namespace: *namespace, Service: "Helm", IsInstall: true,
			Revision: 1},
		"Capabilities": Capabilities{
			KubeVersion: KubeVersion{Version: *kube, Major: kv[0], Minor: kv[1]},
			APIVersions: apiVersions,
		},
		"Files": allFiles,
	}
	var out bytes.Buffer
	for _, tname := range names {
		base := path.Base(tname)
		if strings.HasPrefix(base, "_") {
			continue
		}
		top["Template"] = TemplateInfo{Name: tname, BasePath: path.Join(chart.Name, "templates")}
		var buf bytes.Buffer
		if err := r.tmpl.ExecuteTemplate(&buf, tname, top); err != nil {
			return err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			if *notes != "" {
				if err := os.WriteFile(*notes, []byte(text), 0o644); err != nil {
					return err
				}
			}
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tname, strings.TrimSpace(text))
	}
	_, err = os.Stdout.Write(out.Bytes())
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
