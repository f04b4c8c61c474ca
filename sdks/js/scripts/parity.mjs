// The parity test of the SDKs: every row of the table in docs/sdks.md names,
// for each SDK, the public names that implement the operation; this script
// reads each SDK's public surface and fails when a name is missing, or a
// cell is empty, in an SDK that is present.
//
//   Go:         `go doc -all` of sdks/go (and of its sub-packages for names
//               such as `errdefs.Retryable`): functions, methods (`Type.Method`),
//               struct fields (`Type.Field`), vars and consts.
//   Python:     the `hybox` package of sdks/python, read with Python's ast (no
//               import): the names its __init__ exports; a dotted name is resolved
//               through class members (inherited too), properties' return
//               annotations, annotated attributes and `self.x = Type(...)` in
//               __init__.
//   TypeScript: the type declarations of this package (dist/index.d.ts, from
//               `npm run build`), through the TypeScript checker: exports, static
//               and instance members, property types.
//
// An SDK whose directory (Python) or package (Go: no .go file in sdks/go) is
// absent is skipped with a message; a present SDK is checked in full.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const jsDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const root = resolve(jsDir, "../..");
const goDir = process.env.HYBOX_PARITY_GO_DIR || join(root, "sdks", "go");
const pyDir = process.env.HYBOX_PARITY_PYTHON_DIR || join(root, "sdks", "python");
const doc = process.env.HYBOX_PARITY_DOC || join(root, "docs", "sdks.md");
const docLabel = relative(root, doc);

/** The rows of the first table whose header has Go, Python and TypeScript. */
export function parseTable(md) {
  const lines = md.split("\n");
  const cells = (l) => l.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
  const h = lines.findIndex((l) => l.startsWith("|") && /\bGo\b/.test(l) && /\bPython\b/.test(l) && /\bTypeScript\b/.test(l));
  if (h < 0) throw new Error(`${doc}: no table with the columns Go, Python and TypeScript`);
  const head = cells(lines[h]);
  const col = { go: head.indexOf("Go"), python: head.indexOf("Python"), ts: head.indexOf("TypeScript") };
  const rows = [];
  for (let i = h + 2; i < lines.length && lines[i].startsWith("|"); i++) {
    const c = cells(lines[i]);
    const names = (s) => [...(s ?? "").matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    rows.push({ line: i + 1, op: c[0], go: names(c[col.go]), python: names(c[col.python]), ts: names(c[col.ts]) });
  }
  return rows;
}

// ---- Go
function goSurface(dir) {
  const names = new Set();
  const pkgs = [["", dir], ...readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && readdirSync(join(dir, d.name)).some((f) => f.endsWith(".go") && !f.endsWith("_test.go")))
    .map((d) => [d.name + ".", join(dir, d.name)])];
  for (const [prefix, p] of pkgs) {
    const out = execFileSync("go", ["doc", "-all", "."], { cwd: p, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    let type = "";
    for (const line of out.split("\n")) {
      let m;
      if ((m = /^func \([^)]*?\*?(\w+)(?:\[[^\]]*\])?\) (\w+)/.exec(line))) names.add(prefix + m[1] + "." + m[2]);
      else if ((m = /^func (\w+)/.exec(line))) names.add(prefix + m[1]);
      else if ((m = /^type (\w+)/.exec(line))) {
        names.add(prefix + m[1]);
        type = /\b(struct|interface) \{$/.test(line) ? m[1] : "";
      } else if (/^\}/.test(line)) type = "";
      else if (type && (m = /^\t(\w+(?:, \w+)*)\b/.exec(line))) {
        for (const f of m[1].split(", ")) if (/^[A-Z]/.test(f)) names.add(prefix + type + "." + f);
      }
      else if ((m = /^(?:var|const) (\w+)/.exec(line))) names.add(prefix + m[1]);
      else if ((m = /^\t([A-Z]\w*)\s*(?:=|\w[^=]*=)/.exec(line)) && !type) names.add(prefix + m[1]);
    }
  }
  return (name) => names.has(name);
}

// ---- Python
const pyResolver = String.raw`
import ast, json, pathlib, re, sys
pkg = pathlib.Path(sys.argv[1])
classes, toplevel = {}, set()
def ann_name(node):
    # The first identifier of an annotation that names a class of the package.
    if node is None:
        return None
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    for ident in re.findall(r"[A-Za-z_]\w*", text):
        if ident in classes:
            return ident
    return "?"
trees = {f: ast.parse(f.read_text(), str(f)) for f in sorted(pkg.rglob("*.py"))}
for f, tree in trees.items():
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
for f, tree in trees.items():
    if f.name == "__init__.py" and f.parent == pkg:
        for node in tree.body:
            if isinstance(node, (ast.ImportFrom, ast.Import)):
                toplevel.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                toplevel.add(node.name)
            elif isinstance(node, ast.Assign):
                toplevel.update(t.id for t in node.targets if isinstance(t, ast.Name))
def members(cname, seen=()):
    out = {}
    node = classes.get(cname)
    if node is None or cname in seen:
        return out
    for base in node.bases:
        b = ann_name(base)
        if b in classes:
            out.update(members(b, seen + (cname,)))
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            prop = any(ast.unparse(d) in ("property", "cached_property", "functools.cached_property") for d in item.decorator_list)
            out[item.name] = ann_name(item.returns) if prop else "()"
            if item.name == "__init__":
                for st in ast.walk(item):
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Attribute):
                        out.setdefault(st.target.attr, ann_name(st.annotation))
                    elif isinstance(st, ast.Assign):
                        for t in st.targets:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                typ = ann_name(st.value.func) if isinstance(st.value, ast.Call) else "?"
                                out.setdefault(t.attr, typ)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out[item.target.id] = ann_name(item.annotation)
        elif isinstance(item, ast.Assign):
            for t in item.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = "?"
    return out
missing = []
for name in json.load(sys.stdin):
    first, *rest = name.split(".")
    ok = first in toplevel and not first.startswith("_")
    cur = first if first in classes else None
    for seg in rest:
        if not ok or cur is None or seg.startswith("_"):
            ok = False
            break
        m = members(cur)
        if seg not in m:
            ok = False
            break
        cur = m[seg] if m[seg] in classes else None
    if not ok:
        missing.append(name)
print(json.dumps(missing))
`;

function pySurface(dir, names) {
  // The package's source, read with Python's ast: no import, so none of its
  // dependencies are needed.
  const python = process.env.HYBOX_PARITY_PYTHON || "python3";
  const pkg = [join(dir, "src", "hybox"), join(dir, "hybox")].find((p) => existsSync(join(p, "__init__.py")));
  if (!pkg) throw new Error(`${dir}: no hybox package (hybox/__init__.py or src/hybox/__init__.py)`);
  const out = execFileSync(python, ["-c", pyResolver, pkg], { input: JSON.stringify(names), encoding: "utf8" });
  const missing = new Set(JSON.parse(out));
  return (name) => !missing.has(name);
}

// ---- TypeScript
function tsSurface(dts) {
  const program = ts.createProgram([dts], { strict: true, skipLibCheck: true, noEmit: true });
  const checker = program.getTypeChecker();
  const mod = checker.getSymbolAtLocation(program.getSourceFile(dts));
  const exports = new Map(checker.getExportsOfModule(mod).map((s) => [s.name, s]));
  const isPublic = (sym) =>
    !(sym.declarations ?? []).some(
      (d) => (ts.getCombinedModifierFlags(d) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) !== 0 || ts.getJSDocTags(d).some((t) => t.tagName.text === "internal") || d.name?.kind === ts.SyntaxKind.PrivateIdentifier,
    );
  const member = (type, seg) => {
    const direct = checker.getPropertyOfType(type, seg);
    if (direct) return direct;
    for (const sig of type.getConstructSignatures()) {
      const p = checker.getPropertyOfType(sig.getReturnType(), seg);
      if (p) return p;
    }
    return undefined;
  };
  return (name) => {
    const [first, ...rest] = name.split(".");
    let sym = exports.get(first);
    if (!sym) return false;
    if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym);
    let type = sym.flags & (ts.SymbolFlags.Value) ? checker.getTypeOfSymbol(sym) : checker.getDeclaredTypeOfSymbol(sym);
    for (const seg of rest) {
      let p = member(type, seg);
      if (!p && sym.flags & ts.SymbolFlags.Class) p = checker.getPropertyOfType(checker.getDeclaredTypeOfSymbol(sym), seg);
      if (!p || !isPublic(p)) return false;
      sym = p;
      type = checker.getNonNullableType(checker.getTypeOfSymbol(p));
    }
    return true;
  };
}

// ---- main
const rows = parseTable(readFileSync(doc, "utf8"));
const problems = [];
const sdks = [];
const goPresent = existsSync(goDir) && readdirSync(goDir).some((f) => f.endsWith(".go") && !f.endsWith("_test.go"));
if (goPresent) sdks.push(["Go", "go", goSurface(goDir)]);
else console.log(`parity: SKIP Go: no Go package in ${goDir} (the Go SDK is not on this branch)`);
if (existsSync(pyDir)) {
  sdks.push(["Python", "python", pySurface(pyDir, rows.flatMap((r) => r.python))]);
} else console.log(`parity: SKIP Python: ${pyDir} does not exist (the Python SDK is not on this branch)`);
const dts = join(jsDir, "dist", "index.d.ts");
if (!existsSync(dts)) throw new Error(`${dts} missing: run \`npm run build\` in sdks/js`);
sdks.push(["TypeScript", "ts", tsSurface(dts)]);

for (const [label, key, has] of sdks) {
  let checked = 0;
  for (const r of rows) {
    if (r[key].length === 0) problems.push(`${docLabel}:${r.line}: "${r.op}": no ${label} name`);
    for (const n of r[key]) {
      checked++;
      if (!has(n)) problems.push(`${docLabel}:${r.line}: "${r.op}": ${label} has no public \`${n}\``);
    }
  }
  console.log(`parity: ${label}: ${checked} names in ${rows.length} rows checked`);
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log("parity: ok");
