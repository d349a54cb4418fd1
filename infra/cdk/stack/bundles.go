package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Bundles say where the five functions' code is, so that a service of its
// own deploys its functions (its mains over lambdafn.Main, built with its
// pipelines) with this stack.
//
// A function's bundle is a folder holding its executable bootstrap
// (built for linux/arm64, provided.al2023): the folder is what `sam local
// invoke` runs (the template's aws:asset:path metadata names it). The
// zip beside it, the folder's path + ".zip" (make build-lambda writes
// both), is the function's code asset when it exists; without it the CDK
// zips the folder.
//
// The zero value takes every bundle from Settings.DistDir (context
// "distDir", by default this repository's dist/). Relative paths are
// relative to the working directory.
type Bundles struct {
	// Dir holds the bundles of every function not in Functions, laid out
	// as make build-lambda writes dist/: Dir/<fn>/bootstrap and
	// Dir/<fn>.zip, for the function names Submit, Worker, Sweeper, DLQ
	// and History.
	Dir string
	// Functions maps function names to bundle folders of their own,
	// overriding Dir for those functions.
	Functions map[string]string
}

// bundle is one function's resolved bundle.
type bundle struct {
	// folder is the absolute path of the folder holding bootstrap.
	folder string
	// asset is the code asset: folder + ".zip" when that file exists,
	// else folder.
	asset string
}

// resolve checks b and returns the bundle of every function. defaultDir
// (Settings.DistDir) stands in for an empty Dir.
func (b Bundles) resolve(defaultDir string) (map[string]bundle, error) {
	var unknown []string
	for fn := range b.Functions {
		if !containsString(FunctionNames, fn) {
			unknown = append(unknown, fn)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("stack: Bundles.Functions names unknown functions %v (want %v)", unknown, FunctionNames)
	}
	dir := b.Dir
	if dir == "" {
		dir = defaultDir
	}
	out := map[string]bundle{}
	for _, fn := range FunctionNames {
		folder, ok := b.Functions[fn]
		if !ok {
			if dir == "" {
				return nil, fmt.Errorf("stack: no bundle for function %s: set Props.Bundles.Dir (or Bundles.Functions[%q])", fn, fn)
			}
			folder = filepath.Join(dir, fn)
		}
		abs, err := filepath.Abs(folder)
		if err != nil {
			return nil, fmt.Errorf("stack: bundle of function %s: %w", fn, err)
		}
		// The bootstrap is what Lambda runs and `sam local invoke` runs
		// (see samAssetMetadata).
		boot := filepath.Join(abs, "bootstrap")
		if st, err := os.Stat(boot); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("stack: %s is missing or not executable: build the Lambda bundles first (make build-lambda for this repository's dist/), "+
				"or point Props.Bundles (context %q) at them", boot, CtxDistDir)
		}
		bd := bundle{folder: abs, asset: abs}
		if st, err := os.Stat(abs + ".zip"); err == nil {
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("stack: %s.zip is not a file: remove it, or put the zip of %s there", abs, boot)
			}
			bd.asset = abs + ".zip"
		}
		out[fn] = bd
	}
	return out, nil
}
