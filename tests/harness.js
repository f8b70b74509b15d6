// A Node harness driving one session through `sessiontemp shell`, as an agent's would.
// Environment: SESSIONTEMP_BIN (the script), SESSIONTEMP_ROOT, SESSIONTEMP_SESSION.
// Prints one JSON object: every command's outcome, the background process it left.
"use strict";
const { spawnSync, spawn } = require("child_process");

const bin = process.env.SESSIONTEMP_BIN;
const session = process.env.SESSIONTEMP_SESSION;
const TURNS = 5;
const PER_TURN = 10;
const KILLED = 7;
const BACKGROUND = 13;
const BIG = 21;

function shell(text) {
  const done = spawnSync(bin, ["shell", text], { encoding: "utf8" });
  return { status: done.status, signal: done.signal, stdout: done.stdout, stderr: done.stderr };
}

function killed() {
  // The command prints its pid and directory, then is SIGKILLed while it runs.
  return new Promise((resolve) => {
    const child = spawn(bin, ["shell", 'echo "$$ $TMPDIR"; exec sleep 3600'], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stderr.on("data", (d) => { err += d; });
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) {
        const pid = Number(out.split(" ")[0]);
        process.kill(pid, "SIGKILL");
      }
    });
    child.on("close", (status) => {
      resolve({ status, stdout: out.split(" ").slice(1).join(" "), stderr: err });
    });
  });
}

async function main() {
  const commands = [];
  let background = null;
  for (let turn = 0; turn < TURNS; turn++) {
    for (let i = 0; i < PER_TURN; i++) {
      const n = turn * PER_TURN + i;
      let result;
      if (n === KILLED) {
        result = await killed();
      } else if (n === BACKGROUND) {
        result = shell('sleep 3600 >/dev/null 2>&1 & echo "$TMPDIR"; echo "$!" >&2');
        background = { pid: Number(result.stderr.trim()), directory: result.stdout.trim() };
      } else if (n === BIG) {
        result = shell('head -c 52428800 /dev/zero > "$TMPDIR/big" && echo "$TMPDIR" && stat -c %s "$TMPDIR/big" >&2');
      } else {
        result = shell(`echo "$TMPDIR"; echo ${n} > "$TMPDIR/f${n}"; test -f "$TMPDIR/f${turn * PER_TURN}"`);
      }
      commands.push({ n, turn, status: result.status, directory: result.stdout.trim(), stderr: result.stderr });
    }
    const rotated = spawnSync(bin, ["session", "rotate", session], { encoding: "utf8" });
    if (rotated.status !== 0) throw new Error(`rotate: ${rotated.stderr}`);
  }
  process.stdout.write(JSON.stringify({ commands, background }) + "\n");
}

main();
