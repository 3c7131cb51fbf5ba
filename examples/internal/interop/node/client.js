// The grpc-js-xds client of the interop suite: it speaks the line protocol
// of the Go package github.com/xdspush/xdspush/examples/internal/interop
// (see its doc.go) on stdin and stdout. Usage:
//
//   GRPC_XDS_BOOTSTRAP_CONFIG='{...}' node client.js xds:///ingress /xdspush.interop.Backend/Name
'use strict';

const readline = require('readline');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');

const RPC_TIMEOUT_MS = 5000; // the deadline of each RPC
const RPC_GAP_MS = 2; // the pause between two RPCs

const [target, method] = process.argv.slice(2);
xds.register();
const client = new grpc.Client(target, grpc.credentials.createInsecure());

const out = (line) => process.stdout.write(line + '\n');
out(`hello ${require('@grpc/grpc-js-xds/package.json').version}`);

const start = Date.now();
let first = false;
let rpcs = 0;
let fails = 0;
let stopping = false;
// The command being answered: {kind: 'await', name, deadline} or
// {kind: 'count', n}, with at, seen (by backend), fails and results since
// it arrived.
let cmd = null;

function formatSeen(seen) {
  const names = Object.keys(seen).sort();
  return names.length ? names.map((n) => `${n}=${seen[n]}`).join(',') : '-';
}

// A StringValue's bytes: 0x0a, the length, the string (shorter than 128).
function decode(buf) {
  if (buf.length < 2 || buf[0] !== 0x0a || buf[1] !== buf.length - 2) {
    throw new Error(`unexpected response ${buf.toString('hex')}`);
  }
  return buf.subarray(2).toString('utf8');
}

function command(line) {
  const f = line.trim().split(/\s+/);
  cmd = null;
  const base = {at: Date.now(), seen: {}, fails: 0, results: 0};
  if (f.length === 3 && f[0] === 'await') {
    cmd = {...base, kind: 'await', name: f[1], deadline: base.at + Number(f[2]) * 1000};
  } else if (f.length === 2 && f[0] === 'count') {
    cmd = {...base, kind: 'count', n: Number(f[1])};
  } else {
    out(`error unknown command ${JSON.stringify(line)}`);
  }
}

function result(seq, name, err) {
  const now = Date.now();
  rpcs++;
  if (err) {
    fails++;
    if (cmd) cmd.fails++;
    out(`fail ${seq} ${String(err.message || err).replace(/\n/g, ' ')}`);
  } else {
    if (!first) {
      first = true;
      out(`first ${name} ${now - start}`);
    }
    if (cmd) cmd.seen[name] = (cmd.seen[name] || 0) + 1;
  }
  if (!cmd) return;
  cmd.results++;
  if (cmd.kind === 'await') {
    if (!err && name === cmd.name) {
      out(`await ok ${now - cmd.at} ${formatSeen(cmd.seen)}`);
      cmd = null;
    } else if (now > cmd.deadline) {
      out(`await timeout ${now - cmd.at} ${formatSeen(cmd.seen)}`);
      cmd = null;
    }
  } else if (cmd.results === cmd.n) {
    out(`count ${formatSeen(cmd.seen)} ${cmd.fails}`);
    cmd = null;
  }
}

function call(seq) {
  if (stopping) {
    out(`bye ${rpcs} ${fails}`);
    client.close();
    process.exit(0);
  }
  const deadline = new Date(Date.now() + RPC_TIMEOUT_MS);
  client.makeUnaryRequest(method, (x) => x, (x) => x, Buffer.alloc(0), {deadline}, (err, resp) => {
    let name = null;
    if (!err) {
      try {
        name = decode(resp);
      } catch (e) {
        err = e;
      }
    }
    result(seq, name, err);
    setTimeout(() => call(seq + 1), RPC_GAP_MS);
  });
}

const rl = readline.createInterface({input: process.stdin});
rl.on('line', command);
rl.on('close', () => { stopping = true; });
call(1);
