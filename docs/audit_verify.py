# Verifies a byoc audit export (byoc audit export --install I > FILE):
# python3 audit_verify.py FILE. The algorithm is README.md, "Audit".
import hashlib, json, sys

prev, seq = "", 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    fields = [r["chain"], str(r["seq"]), str(r["at"]), r["kind"], r["actor"],
              r["subject"], r["data"], r["prev"]]
    h = hashlib.sha256(b"".join(b"%d:%s," % (len(f.encode()), f.encode())
                                for f in fields)).hexdigest()
    seq += 1
    if r["seq"] != seq:
        sys.exit(f"record {seq} removed")
    if r["prev"] != prev or h != r["hash"]:
        sys.exit(f"record {r['seq']} changed")
    prev = h
print(f"{seq} records verified, last hash {prev}")
