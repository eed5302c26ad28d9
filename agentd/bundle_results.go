package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The files of a results file.
const (
	resultsFile = "results.json"
	journalFile = "journal.jsonl"
	jobsFile    = "jobs.json"
	// sealedJobsFile is the jobs themselves, sealed to imsd's key.
	sealedJobsFile = "jobs.sealed"
	// journalHeadFile, in a bundle's directory (not a results file's),
	// is the journal head its manifest named.
	journalHeadFile = "journal-head.json"
	// bundleManifestFile and bundleSignatureFile are the bundle's own
	// manifest and imsd's signature of it, kept in the bundle's
	// directory and carried in its results file under these names.
	bundleManifestFile  = "bundle-manifest.json"
	bundleSignatureFile = "bundle-manifest.sig"
	// bundleViewFile, in a bundle's directory, is the bundle's jobs.json
	// (the view imsd signed); a results file carries it as jobs.json.
	bundleViewFile = "jobs-view.json"
)

// journalHead is the agent's journal head imsd imported last, as a
// bundle's manifest names it (imsd signed it): 0, "" for none.
type journalHead struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// journalAfter is journal (the agent's audit journal, JSON lines) from
// the record after head on, or the whole journal when head names none
// (or the bundle was imported by an agent that kept no head). It
// refuses a head that is not a record of this journal.
func journalAfter(journal []byte, bundle string, head journalHead) ([]byte, error) {
	if head.Seq == 0 {
		return journal, nil
	}
	rest := journal
	for len(rest) > 0 {
		line := rest
		n := bytes.IndexByte(rest, '\n')
		if n >= 0 {
			line, rest = rest[:n], rest[n+1:]
		} else {
			rest = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r struct {
			Seq  int64  `json:"seq"`
			Hash string `json:"hash"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("the agent's audit journal: %w", err)
		}
		if r.Seq < head.Seq {
			continue
		}
		if r.Seq > head.Seq || r.Hash != head.Hash {
			break
		}
		return rest, nil
	}
	return nil, fmt.Errorf("bundle %s names the agent's journal record %d with hash %s as the last imsd imported, and this agent's audit journal holds no such record: the bundle was made for another agent or state directory (run export-results with the --state-dir of the agent that imported it)", bundle, head.Seq, head.Hash)
}

// exportResultsCmd runs agentd bundle export-results.
func exportResultsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentd bundle export-results", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), bundleUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	bundle := fs.String("bundle", "", "the bundle `id` whose results to export (default: the bundle imported last)")
	out := fs.String("o", "", "the results `file` to write")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, "agentd bundle export-results: --state-dir DIR and -o FILE are required\n"+bundleUsage)
		return 2
	}
	if err := exportResults(*stateDir, *bundle, *out, stdout); err != nil {
		fmt.Fprintf(stderr, "agentd bundle export-results: %v\n", err)
		return 1
	}
	return 0
}

func exportResults(stateDir, bundle, out string, stdout io.Writer) error {
	id, err := identity.Load(stateDir)
	if err != nil {
		return err
	}
	root := filepath.Join(stateDir, "bundles")
	if bundle == "" {
		ents, err := os.ReadDir(root)
		if err != nil {
			return fmt.Errorf("no bundle was imported here: %w", err)
		}
		var newest time.Time
		for _, e := range ents {
			if fi, err := os.Stat(filepath.Join(root, e.Name(), resultsFile)); err == nil && fi.ModTime().After(newest) {
				newest, bundle = fi.ModTime(), e.Name()
			}
		}
		if bundle == "" {
			return fmt.Errorf("no bundle results under %s", root)
		}
	}
	res, err := os.ReadFile(filepath.Join(root, filepath.Base(bundle), resultsFile))
	if err != nil {
		return err
	}
	var r bundleResults
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("%s: %w", resultsFile, err)
	}
	jobs, err := os.ReadFile(filepath.Join(root, filepath.Base(bundle), jobsFile))
	if err != nil {
		return err
	}
	// The bundle as imsd signed it: imsd checks the results against it.
	kept := map[string][]byte{}
	for _, name := range []string{bundleManifestFile, bundleSignatureFile, bundleViewFile} {
		b, err := os.ReadFile(filepath.Join(root, filepath.Base(bundle), name))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("bundle %s was imported by an agentd that kept no copy of it (%s is missing), and imsd checks the results against the bundle it signed: import the same bundle again with this agentd (no job runs twice), then export its results", r.Bundle, name)
		}
		if err != nil {
			return err
		}
		kept[name] = b
	}
	journal, err := os.ReadFile(filepath.Join(auditlog.Dir(stateDir), auditlog.AgentFile))
	if err != nil {
		return fmt.Errorf("the agent's audit journal: %w", err)
	}
	// Only the records imsd has not taken yet.
	var head journalHead
	if b, err := os.ReadFile(filepath.Join(root, filepath.Base(bundle), journalHeadFile)); err == nil {
		if err := json.Unmarshal(b, &head); err != nil {
			return fmt.Errorf("%s: %w", journalHeadFile, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if journal, err = journalAfter(journal, r.Bundle, head); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".results-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The jobs carry the install's sensitive values: they go back sealed
	// to the imsd key that signed them (jobs.sealed), beside their
	// readable view (jobs.json), the bundle's, as they came.
	var full []agentproto.BundleJob
	if err := json.Unmarshal(jobs, &full); err != nil {
		return fmt.Errorf("%s: %w", jobsFile, err)
	}
	var imsdKey ed25519.PublicKey
	for _, k := range id.IMSDKeys {
		if len(full) > 0 && agentproto.KeyID(k) == full[0].KeyID {
			imsdKey = k
		}
	}
	if len(full) == 0 && len(id.IMSDKeys) > 0 {
		imsdKey = id.IMSDKeys[0]
	}
	if imsdKey == nil {
		return fmt.Errorf("%s: the jobs were not signed by an imsd key this agent trusts", jobsFile)
	}
	sealed, err := agentchannel.SealTo(imsdKey, agentproto.ResultsJobsInfo(id.InstallID, id.AgentID), jobs)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{resultsFile: res, journalFile: journal, jobsFile: kept[bundleViewFile], sealedJobsFile: sealed,
		bundleManifestFile: kept[bundleManifestFile], bundleSignatureFile: kept[bundleSignatureFile]} {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o600); err != nil {
			return err
		}
	}
	files, err := bundlefile.Scan(work)
	if err != nil {
		return err
	}
	m := bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindResults, ID: r.Bundle, InstallID: id.InstallID, AgentID: id.AgentID,
		Revision: r.Revision, Created: time.Now().UTC(), Files: files}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	pub := id.PrivateKey.Public().(ed25519.PublicKey)
	sig := bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleResults(id.PrivateKey, raw)}
	if err := bundlefile.WriteFile(out, 0o600, work, raw, sig); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: results of bundle %s (%d jobs) and the agent's audit journal, signed by agent %s (key %s)\n",
		out, r.Bundle, len(r.Jobs), id.AgentID, sig.KeyID)
	return nil
}
