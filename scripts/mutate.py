#!/usr/bin/python3
"""Mutation testing for Flashroll: does the suite notice a one-point change?

Samples single-point mutants in the named C++ sources, applies each one in a
scratch copy of the tree (never the work tree), rebuilds only the test binary
that covers the file, runs that binary's tests for the file and records
whether they failed (killed), passed (survived) or ran past their time limit
(timed out; counted as killed). Mutants that do not compile are skipped and
reported, but are not part of the score.

    score = killed (including timed out and crashed) / mutants that compiled

Usage (from the repository root; `make mutation` wraps it):

    /usr/bin/python3 scripts/mutate.py --paths "sandbox/ common/" -n 200 --seed 1
    /usr/bin/python3 scripts/mutate.py --paths "sandbox/ common/" -n 300 --seed 1 --resume
    /usr/bin/python3 scripts/mutate.py --resume --retest-survivors   # after adding tests
    /usr/bin/python3 scripts/mutate.py --report                      # print the record

The sample is deterministic for a seed: every candidate mutant gets the key
sha1(seed:id), and mutants are tried in key order until -n of them compiled.
A candidate's id depends on its file, operator and the text of its line, so
editing one file does not reorder the sample of another. The record
(--record, default .cache/mutation/record.json) keeps every result; --resume
extends it instead of starting afresh, so a large sample can be built up over
several sittings.

Which tests cover which sources is in scripts/mutation_map.json: the longest
matching "prefix" entry names the CMake test target, a gtest filter and
whether the tests run isolated. Isolated runs (all of them by default) happen
in a private mount namespace (unshare -m --propagation private) where / is
remounted read-only, /tmp and /run are fresh tmpfs, and /var/lib (where the
sandbox keeps its image cache, /var/lib/flashroll) is a scratch directory, so
a mutant of the sandbox code, run as root, cannot remove or change anything on
the host. Survivors that are equivalent to the original are listed in the
map's "equivalent" table (id -> reason); they stay in the denominator.

Standard library only.
"""

import argparse
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------
# Candidate mutants


@dataclasses.dataclass
class Mutant:
    path: str       # relative to the repository root
    line: int       # 1-based line number of the mutated line
    op: str         # operator name
    before: str     # the original line
    after: str      # its replacement (may hold two lines, or be empty)
    mid: str = ""   # stable id

    def diff(self):
        out = [f"--- a/{self.path}", f"+++ b/{self.path}", f"@@ line {self.line} ({self.op}) @@",
               "-" + self.before]
        out += ["+" + text for text in self.after.split("\n")] if self.after.strip() else ["+"]
        return "\n".join(out)


def mask_code(lines):
    """Returns the lines with comments and the contents of string and character
    literals replaced by spaces (quotes kept), so operators are only looked for
    in code. Handles // and /* */ comments, escapes and raw strings."""
    out = []
    in_block = False
    raw_end = None  # ')delim"' while inside a raw string literal
    for text in lines:
        chars = list(text)
        i, n = 0, len(text)
        while i < n:
            if raw_end is not None:
                end = text.find(raw_end, i)
                stop = n if end < 0 else end + len(raw_end) - 1
                for j in range(i, stop):
                    chars[j] = " "
                if end < 0:
                    i = n
                else:
                    raw_end = None
                    i = stop + 1
                continue
            if in_block:
                end = text.find("*/", i)
                stop = n if end < 0 else end + 2
                for j in range(i, stop):
                    chars[j] = " "
                if end >= 0:
                    in_block = False
                i = stop
                continue
            c = text[i]
            if text.startswith("//", i):
                for j in range(i, n):
                    chars[j] = " "
                break
            if text.startswith("/*", i):
                in_block = True
                continue
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                raw_end = ")" + m.group(1) + '"'
                i += m.end()
                continue
            if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
                j = i + 1
                while j < n and text[j] != c:
                    j += 2 if text[j] == "\\" else 1
                for k in range(i + 1, min(j, n)):
                    chars[k] = " "
                i = j + 1
                continue
            i += 1
        out.append("".join(chars))
    return out


REL = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
DECL = re.compile(r"^(?:const\s|static\s|constexpr\s|auto[\s&*]|struct\s|using\s|typedef\s|"
                  r"[\w:]+(?:<.*>)?[&*]?\s+[&*]?\w+\s*(?:=|\(|\{|;|\[))")
FUNC_HEAD = re.compile(r"^(?:static\s+|inline\s+)*(Status|bool|void)\s+[\w:]+\(")
INT_LIT = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)([uUlLzZ]*)(?![\w.])")
# Constants whose value only tunes speed (buffer sizes, sleeps, reservations):
# changing them gives equivalent mutants, so they are not sampled.
TUNING = re.compile(r"sleep|milliseconds|microseconds|reserve\(|buffer|\bchar \w+\[|kBuffer|kChunk")
FLOAT_LIT = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)([fF]?)(?![\w.])")


def matching_paren(code, open_index):
    depth = 0
    for i in range(open_index, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


OVERLAY = []  # --overlay: work-tree paths laid over HEAD


def read_source(path, worktree):
    """The file as the scratch tree will hold it: git HEAD's, or the work tree's."""
    if worktree or any(path == rel or path.startswith(rel.rstrip("/") + "/") for rel in OVERLAY):
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            return f.read()
    proc = subprocess.run(["git", "-C", REPO, "show", f"HEAD:{path}"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    return proc.stdout.decode() if proc.returncode == 0 else None


def candidates_for_file(path, worktree):
    """Every single-point mutant of one source file, in file order."""
    text = read_source(path, worktree)
    if text is None:
        return []
    lines = text.split("\n")
    code = mask_code(lines)
    found = []

    def add(index, op, after):
        if after != lines[index]:
            found.append(Mutant(path, index + 1, op, lines[index], after))

    def replace(index, start, end, text):
        return lines[index][:start] + text + lines[index][end:]

    prev_code = ";"
    for i, (text, masked) in enumerate(zip(lines, code)):
        stripped = masked.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            prev_code = ";"
            continue
        for m in re.finditer(r"(?<=\s)(<=|>=|==|!=|<|>)(?=\s)", masked):
            add(i, "relational", replace(i, m.start(), m.end(), REL[m.group(1)]))
        for m in re.finditer(r"(?<=\s)(&&|\|\|)(?=\s)", masked):
            add(i, "logical", replace(i, m.start(), m.end(), "||" if m.group(1) == "&&" else "&&"))
        for m in re.finditer(r"\b(if|while)\s*\(", masked):
            if masked[m.start():].startswith("if constexpr"):
                continue
            open_index = m.end() - 1
            close = matching_paren(masked, open_index)
            if close < 0:
                continue
            inner = text[open_index + 1:close]
            if ";" in masked[open_index + 1:close]:  # if (init; cond) is left alone
                continue
            add(i, "negate", replace(i, open_index + 1, close, "!(" + inner + ")"))
        for m in re.finditer(r"\b(true|false)\b", masked):
            add(i, "constant", replace(i, m.start(), m.end(), "false" if m.group(1) == "true" else "true"))
        for m in FLOAT_LIT.finditer(masked):
            value = float(m.group(1))
            new = "%.17g" % (value * 1e6 if value != 0 else 1.0)
            if "." not in new and "e" not in new:
                new += ".0"
            add(i, "constant", replace(i, m.start(1), m.end(1), new))
        for m in INT_LIT.finditer("" if TUNING.search(masked) else masked):
            literal = m.group(1)
            if literal[:2] in ("0x", "0X"):
                value, fmt = int(literal, 16), hex
            elif len(literal) > 1 and literal[0] == "0":  # octal, as in 0777
                value, fmt = int(literal, 8), (lambda v: "0" + format(v, "o"))
            else:
                value, fmt = int(literal), str
            add(i, "boundary", replace(i, m.start(1), m.end(1), fmt(value + 1)))
            if value > 0:
                add(i, "boundary", replace(i, m.start(1), m.end(1), fmt(value - 1)))
        # Deleted statement: a whole one-line statement that is not a declaration
        # and not a plain return (those rarely compile once deleted).
        starts_statement = prev_code.endswith((";", "{", "}", ":"))
        if (starts_statement and stripped.endswith(";") and not DECL.match(stripped)
                and not stripped.endswith(("= delete;", "= default;"))
                and not stripped.startswith(("return", "case ", "default", "}", "else", "break", "public",
                                             "private", "protected"))
                and stripped.count("(") == stripped.count(")")):
            indent = text[:len(text) - len(text.lstrip())]
            add(i, "delete", indent + "// mutant: statement deleted")
        # Early return at the top of a function body (Status, bool or void functions).
        head = FUNC_HEAD.match(masked)
        if head and not masked.startswith(" "):
            for j in range(i, min(i + 8, len(lines))):
                body = code[j].rstrip()
                if body.endswith(";"):
                    break
                if body.endswith("{"):
                    kind = head.group(1)
                    returns = {"Status": ["return Status::Ok();"], "bool": ["return true;", "return false;"],
                               "void": ["return;"]}[kind]
                    for ret in returns:
                        add(j, "early-return", lines[j] + "\n  " + ret)
                    break
        prev_code = stripped
    # Ids: file, operator, the line's text, which of the identical lines it is,
    # and the replacement. Line numbers are left out so edits elsewhere in the
    # file keep ids stable.
    seen = {}
    for mutant in found:
        key = (mutant.op, mutant.before, mutant.after)
        seen[key] = seen.get(key, 0) + 1
        digest = hashlib.sha1(f"{mutant.path}\0{mutant.op}\0{mutant.before}\0{mutant.after}\0{seen[key]}"
                              .encode()).hexdigest()[:12]
        mutant.mid = f"{mutant.path}@{digest}"
    return found


def expand_paths(specs):
    files = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        full = os.path.join(REPO, spec)
        matches = sorted(glob.glob(full)) if any(c in spec for c in "*?[") else [full]
        for match in matches:
            if os.path.isdir(match):
                for root, _, names in sorted(os.walk(match)):
                    for name in sorted(names):
                        if name.endswith(".cc") and not name.endswith("_test.cc"):
                            files.append(os.path.relpath(os.path.join(root, name), REPO))
            elif os.path.isfile(match):
                files.append(os.path.relpath(match, REPO))
            else:
                sys.exit(f"mutate.py: {spec}: no such file or directory")
    return sorted(set(files))


# ---------------------------------------------------------------------------
# The map from sources to tests


def load_map(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data


def entry_for(test_map, path):
    best = None
    for entry in test_map["tests"]:
        if path.startswith(entry["prefix"]) and (best is None or len(entry["prefix"]) > len(best["prefix"])):
            best = entry
    return best


def module_of(path):
    return os.path.dirname(path) or "."


# ---------------------------------------------------------------------------
# The scratch tree


def skipped_top(name):
    return name.startswith("build") or name in (".git", ".cache", "runs")


def mirror(origin, dest):
    """Makes `dest` hold what `origin` holds (like rsync -rlc --delete): only
    files whose content differs are written; build directories, .git and
    .cache are neither copied nor deleted."""
    for root, dirs, files in os.walk(origin):
        rel = os.path.relpath(root, origin)
        if rel == ".":
            dirs[:] = [d for d in dirs if not skipped_top(d)]
            files = [f for f in files if not skipped_top(f)]
        dirs[:] = [d for d in dirs if d != "__pycache__" and os.path.join(rel, d) != os.path.join(".", "models", "data")
                   and not (rel == "models" and d == "data")]
        target_root = os.path.normpath(os.path.join(dest, rel))
        os.makedirs(target_root, exist_ok=True)
        wanted = set(dirs) | set(files)
        for name in os.listdir(target_root):
            if name in wanted or (rel == "." and skipped_top(name)) or (rel == "models" and name == "data"):
                continue
            victim = os.path.join(target_root, name)
            if os.path.isdir(victim) and not os.path.islink(victim):
                shutil.rmtree(victim)
            else:
                os.remove(victim)
        for name in files:
            src, dst = os.path.join(root, name), os.path.join(target_root, name)
            if os.path.islink(src):
                link = os.readlink(src)
                if not (os.path.islink(dst) and os.readlink(dst) == link):
                    if os.path.lexists(dst):
                        os.remove(dst)
                    os.symlink(link, dst)
                continue
            if os.path.islink(dst):
                os.remove(dst)
            if os.path.isfile(dst) and os.path.getsize(dst) == os.path.getsize(src):
                with open(src, "rb") as a, open(dst, "rb") as b:
                    if a.read() == b.read():
                        continue
            shutil.copyfile(src, dst)
            shutil.copymode(src, dst)


class Scratch:
    def __init__(self, root, jobs):
        self.root = os.path.abspath(root)
        self.src = os.path.join(self.root, "src")
        # The build directory sits inside the copy (ccache base_dir = the copy).
        self.build = os.path.join(self.src, "build-mutation")
        self.state = os.path.join(self.root, "state")
        self.jobs = jobs
        self.env = dict(os.environ)
        self.env.setdefault("CCACHE_DIR", os.path.join(REPO, ".cache", "ccache"))
        self.env["CCACHE_BASEDIR"] = self.src
        self.env["CCACHE_NOHASHDIR"] = "1"

    def sync(self, worktree, overlay=()):
        """Copies the committed tree (git HEAD; with worktree=True the work tree,
        uncommitted edits included) into the scratch tree. Files whose content
        is unchanged are left alone, so the build stays incremental; changed
        ones get a fresh mtime, so a file restored after a mutant is rebuilt."""
        os.makedirs(self.src, exist_ok=True)
        os.makedirs(os.path.join(self.state, "var-lib", "flashroll"), exist_ok=True)
        origin = REPO
        if not worktree:
            origin = os.path.join(self.root, "head")
            shutil.rmtree(origin, ignore_errors=True)
            os.makedirs(origin)
            archive = subprocess.Popen(["git", "-C", REPO, "archive", "--format=tar", "HEAD"], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", origin], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                sys.exit("mutate.py: git archive HEAD failed")
            # Work-tree files laid over HEAD: tests not committed yet.
            for rel in overlay:
                src = os.path.join(REPO, rel)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(origin, rel), dirs_exist_ok=True)
                elif os.path.isfile(src):
                    os.makedirs(os.path.dirname(os.path.join(origin, rel)), exist_ok=True)
                    shutil.copyfile(src, os.path.join(origin, rel))
                else:
                    sys.exit(f"mutate.py: --overlay {rel}: no such file or directory")
        mirror(origin, self.src)

    def configure(self):
        if os.path.exists(os.path.join(self.build, "build.ninja")):
            return
        # -O0 without debug information: a mutant's one file recompiles several
        # times faster than at -O3; warnings are not errors, so a mutant that
        # only leaves a variable unused still counts.
        subprocess.run(["cmake", "-S", self.src, "-B", self.build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Debug",
                        "-DCMAKE_CXX_FLAGS_DEBUG=-O0", "-DCMAKE_C_FLAGS_DEBUG=-O0", "-DFLASHROLL_WERROR=OFF",
                        "-DFLASHROLL_BENCH=OFF"], check=True, env=self.env, stdout=subprocess.DEVNULL)

    def build_targets(self, targets, timeout=None):
        """Returns (ok, output tail)."""
        try:
            proc = subprocess.run(["ninja", "-C", self.build, f"-j{self.jobs}"] + list(targets), env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                                  start_new_session=True)
        except subprocess.TimeoutExpired as e:
            return False, (e.output or b"").decode(errors="replace")[-2000:] + "\n(build timed out)"
        return proc.returncode == 0, proc.stdout.decode(errors="replace")[-4000:]

    def write(self, rel, text):
        path = os.path.join(self.src, rel)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        now = time.time()
        os.utime(path, (now, now))

    def test_command(self, entry):
        binary = os.path.join(self.build, "tests", entry["target"])
        argv = [binary, "--gtest_brief=1"]
        if entry.get("filter"):
            argv.append("--gtest_filter=" + entry["filter"])
        if not entry.get("isolate", True):
            return argv
        # Private mount namespace: fresh /run and /tmp, scratch /var/lib, read-only /.
        script = r"""
set -e
S="$1"; shift
mount -t tmpfs -o mode=755 flashroll-mut-run /run
mkdir -p /run/.scratch
mount --bind "$S" /run/.scratch
mount -t tmpfs -o mode=1777 flashroll-mut-tmp /tmp
mkdir -p "$S"
mount --bind /run/.scratch "$S"
umount /run/.scratch
mount --bind "$S/state/var-lib" /var/lib
mount -o remount,bind,ro /
exec "$@"
"""
        return ["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", self.root] + argv

    def run_tests(self, entry, timeout):
        """Returns (status, seconds, output tail); status is pass, fail or timeout."""
        start = time.monotonic()
        proc = subprocess.Popen(self.test_command(entry), cwd=self.src, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = proc.communicate()
            return "timeout", time.monotonic() - start, out.decode(errors="replace")[-1500:]
        status = "pass" if proc.returncode == 0 else "fail"
        return status, time.monotonic() - start, out.decode(errors="replace")[-1500:]


# ---------------------------------------------------------------------------
# The record


def load_record(path):
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {"version": 1, "runs": [], "mutants": {}}


def save_record(path, record):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(tmp, tmp[:-4])


KILLED = ("killed", "timeout")


def report(record, current, equivalent, out=sys.stdout):
    """Prints figures per module and overall for the recorded mutants that
    still apply to the current sources (`current`: id -> Mutant)."""
    rows = {}
    survivors = []
    uncompiled = 0
    for mid, result in sorted(record["mutants"].items()):
        if mid not in current:
            continue
        status = result["status"]
        if status == "uncompiled":
            uncompiled += 1
            continue
        module = module_of(result["path"])
        row = rows.setdefault(module, {"killed": 0, "timeout": 0, "survived": 0, "equivalent": 0})
        row["timeout" if status == "timeout" else "killed" if status == "killed" else "survived"] += 1
        if status == "survived":
            survivors.append((result, mid))
            if mid in equivalent:
                row["equivalent"] += 1
    total = {"killed": 0, "timeout": 0, "survived": 0, "equivalent": 0}
    print(f"{'module':<20} {'compiled':>8} {'killed':>7} {'timeout':>7} {'survived':>8} {'(equiv.)':>8} {'score':>7}",
          file=out)
    for module in sorted(rows):
        row = rows[module]
        for key in total:
            total[key] += row[key]
        print(format_row(module, row), file=out)
    print(format_row("overall", total), file=out)
    print(f"(not compiled, not counted: {uncompiled})", file=out)
    if survivors:
        print(f"\nSurvivors ({len(survivors)}):", file=out)
        for result, mid in sorted(survivors, key=lambda s: (s[0]["path"], s[0]["line"])):
            mutant = current[mid]
            note = f"  [equivalent: {equivalent[mid]}]" if mid in equivalent else ""
            print(f"\n{mutant.path}:{mutant.line} {mutant.op} id={mid}{note}", file=out)
            print(mutant.diff(), file=out)
    return total


def format_row(name, row):
    compiled = row["killed"] + row["timeout"] + row["survived"]
    killed = row["killed"] + row["timeout"]
    score = f"{100.0 * killed / compiled:6.1f}%" if compiled else "     -"
    return (f"{name:<20} {compiled:>8} {row['killed']:>7} {row['timeout']:>7} {row['survived']:>8} "
            f"{row['equivalent']:>8} {score:>7}")


# ---------------------------------------------------------------------------


class Progress:
    def __init__(self):
        self.tty = sys.stderr.isatty()

    def show(self, text):
        if self.tty:
            width = shutil.get_terminal_size((120, 20)).columns - 1
            sys.stderr.write("\r\033[K" + text[:width])
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def done(self):
        if self.tty:
            sys.stderr.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", default="", help="sources or folders to mutate (space-separated; globs)")
    parser.add_argument("-n", type=int, default=200, help="compiled mutants wanted in the sample (total)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resume", action="store_true", help="extend the record instead of starting afresh")
    parser.add_argument("--retest-survivors", action="store_true",
                        help="run the recorded survivors again (after adding tests)")
    parser.add_argument("--report", action="store_true", help="print the record's figures and stop")
    parser.add_argument("--list", action="store_true", help="print the sampled candidates and stop")
    parser.add_argument("--record", default=os.path.join(REPO, ".cache", "mutation", "record.json"))
    parser.add_argument("--map", default=os.path.join(REPO, "scripts", "mutation_map.json"))
    parser.add_argument("--scratch", default="/tmp/flashroll-mutation")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--worktree", action="store_true",
                        help="copy the work tree, uncommitted edits included, instead of git HEAD")
    parser.add_argument("--overlay", default="",
                        help="work-tree files or folders laid over git HEAD in the copy (uncommitted tests)")
    parser.add_argument("--merge", default="", help="add the mutants of another record to this one, then report")
    parser.add_argument("--build-only", action="store_true", help="sync and build the test binaries, then stop")
    parser.add_argument("--timeout-factor", type=float, default=3.0)
    parser.add_argument("--min-timeout", type=float, default=10.0, help="seconds; floor of the per-mutant limit")
    args = parser.parse_args()

    OVERLAY.extend(args.overlay.split())
    test_map = load_map(args.map)
    equivalent = test_map.get("equivalent", {})
    paths = args.paths.split() or test_map["default_paths"]
    files = expand_paths(paths)
    current = {}
    for path in files:
        if entry_for(test_map, path) is None:
            print(f"mutate.py: {path}: no entry in {os.path.relpath(args.map, REPO)}; skipped", file=sys.stderr)
            continue
        for mutant in candidates_for_file(path, args.worktree):
            current[mutant.mid] = mutant

    record = load_record(args.record) if (args.resume or args.report or args.retest_survivors or args.merge) else None
    if record is None:
        # A fresh sample: the previous record is kept as .old once the first result is saved.
        record = {"version": 1, "runs": [], "mutants": {}}
        if os.path.exists(args.record) and not (args.list or args.build_only):
            shutil.copyfile(args.record, args.record + ".old")
    if args.merge:
        other = load_record(args.merge)
        record["mutants"].update(other["mutants"])
        record["runs"] += other["runs"]
        save_record(args.record, record)
    if args.report or args.merge:
        report(record, current, equivalent)
        return 0

    order = sorted(current, key=lambda mid: hashlib.sha1(f"{args.seed}:{mid}".encode()).hexdigest())
    compiled = [mid for mid in order if mid in record["mutants"] and record["mutants"][mid]["status"] != "uncompiled"]
    todo = []
    if args.retest_survivors:
        todo = [mid for mid in order if record["mutants"].get(mid, {}).get("status") == "survived"
                and mid not in equivalent]
    else:
        # Every untried candidate in key order; the loop below stops once -n compiled.
        todo = [mid for mid in order if mid not in record["mutants"]] if len(compiled) < args.n else []
    if args.list:
        for mid in todo[:max(0, args.n - len(compiled))]:
            m = current[mid]
            print(f"{m.path}:{m.line} {m.op} {mid}\n{m.diff()}\n")
        return 0
    print(f"mutate.py: {len(files)} files, {len(current)} candidate mutants; {len(compiled)} compiled in the record, "
          f"{'retesting ' + str(len(todo)) + ' survivors' if args.retest_survivors else 'target ' + str(args.n)}",
          file=sys.stderr)

    scratch = Scratch(args.scratch, args.jobs)
    scratch.sync(args.worktree, args.overlay.split())
    scratch.configure()
    entries = {}
    for path in files:
        entry = entry_for(test_map, path)
        if entry:
            entries[entry["prefix"]] = entry
    # Baselines: every needed test binary builds and passes unmutated.
    targets = sorted({entry["target"] for entry in entries.values()})
    for target in targets:  # one at a time, so the first module's tests are ready early
        ok, log = scratch.build_targets([target])
        if not ok:
            print(log, file=sys.stderr)
            sys.exit(f"mutate.py: the unmutated tree does not build {target} (see above)")
    if args.build_only:
        return 0
    baselines = {}
    for prefix, entry in sorted(entries.items()):
        status, seconds, out = scratch.run_tests(entry, timeout=600)
        if status != "pass":
            print(out, file=sys.stderr)
            sys.exit(f"mutate.py: the tests for {prefix} fail unmutated ({entry['target']} {entry.get('filter', '')})")
        baselines[prefix] = seconds
        print(f"mutate.py: baseline {prefix}: {entry['target']} {seconds:.1f}s", file=sys.stderr)
    run_info = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "paths": paths, "n": args.n, "seed": args.seed,
                "retest": args.retest_survivors, "baselines": baselines}
    record["runs"].append(run_info)

    progress = Progress()
    counts = {"killed": 0, "timeout": 0, "survived": 0, "uncompiled": 0}
    started = time.monotonic()
    done_compiled = len(compiled)
    originals = {}
    interrupted = False
    try:
        for index, mid in enumerate(todo):
            if not args.retest_survivors and done_compiled >= args.n:
                break
            mutant = current[mid]
            entry = entry_for(test_map, mutant.path)
            if mutant.path not in originals:
                with open(os.path.join(scratch.src, mutant.path), encoding="utf-8") as f:
                    originals[mutant.path] = f.read()
            lines = originals[mutant.path].split("\n")
            if lines[mutant.line - 1] != mutant.before:
                continue  # the scratch copy differs from the work tree's (edited mid-run)
            lines[mutant.line - 1] = mutant.after
            elapsed = time.monotonic() - started
            tested = sum(counts[k] for k in ("killed", "timeout", "survived"))
            rate = elapsed / max(1, index)
            remaining = (len(todo) if args.retest_survivors else args.n - done_compiled)
            progress.show(f"[{done_compiled}/{args.n if not args.retest_survivors else len(todo)}] "
                          f"killed {counts['killed']} timeout {counts['timeout']} survived {counts['survived']} "
                          f"not compiled {counts['uncompiled']} | {mutant.path}:{mutant.line} {mutant.op} | "
                          f"{elapsed / 60:.0f} min, ~{rate * max(0, remaining) / 60:.0f} min left"
                          if tested or index else f"[{done_compiled}/{args.n}] {mutant.path}:{mutant.line} {mutant.op}")
            result = {"path": mutant.path, "line": mutant.line, "op": mutant.op, "before": mutant.before,
                      "after": mutant.after, "seed": args.seed}
            try:
                scratch.write(mutant.path, "\n".join(lines))
                t0 = time.monotonic()
                ok, log = scratch.build_targets([entry["target"]], timeout=900)
                result["build_s"] = round(time.monotonic() - t0, 1)
                if not ok:
                    result["status"] = "uncompiled"
                else:
                    limit = max(args.timeout_factor * baselines[entry["prefix"]], args.min_timeout)
                    status, seconds, out = scratch.run_tests(entry, timeout=limit)
                    result["test_s"] = round(seconds, 1)
                    result["status"] = {"pass": "survived", "fail": "killed", "timeout": "timeout"}[status]
                    if status == "fail":
                        failed = re.findall(r"\[  FAILED  \] (\S+)", out)
                        result["failed"] = sorted(set(failed))[:5] if failed else [out.strip().split("\n")[-1][:200]]
            finally:
                scratch.write(mutant.path, originals[mutant.path])
            counts[result["status"]] += 1
            if result["status"] != "uncompiled":
                done_compiled += 1 if mid not in record["mutants"] else 0
            record["mutants"][mid] = result
            save_record(args.record, record)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for path, text in originals.items():
            scratch.write(path, text)
        progress.done()
        save_record(args.record, record)
    print(f"\nmutate.py: this run: killed {counts['killed']}, timed out {counts['timeout']}, survived "
          f"{counts['survived']}, not compiled {counts['uncompiled']} in {(time.monotonic() - started) / 60:.1f} min"
          + (" (interrupted)" if interrupted else ""))
    print(f"Record: {os.path.relpath(args.record, REPO)} (all runs; mutants of the current sources)\n")
    report(record, current, equivalent)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
