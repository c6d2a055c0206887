// A browser terminal attached to a sandbox-supervisor terminal.
//
// Open index.html?daemon=ws://HOST:PORT&terminal=TERMINAL_ID&ticket=TICKET. The ticket comes
// from the `terminal.ticket` method (or `supervisor ticket ID`): browsers cannot set headers
// on a WebSocket, so a short-lived ticket in the query string stands in for the token.
import { Terminal } from "./node_modules/@xterm/xterm/lib/xterm.mjs";
import { FitAddon } from "./node_modules/@xterm/addon-fit/lib/addon-fit.mjs";

const params = new URLSearchParams(location.search);
const daemon = params.get("daemon") ?? `ws://${location.hostname}:3000`;
const terminalId = params.get("terminal");
const ticket = params.get("ticket");
const status = document.getElementById("status");

const term = new Terminal({ cursorBlink: true, scrollback: 5000 });
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById("terminal"));
fit.fit();

const encoder = new TextEncoder();
let socket = null;
let lastCursor = null; // resume point: a reconnect replays only what came after it
let finished = false;

function connect() {
  const query = new URLSearchParams({ cols: term.cols, rows: term.rows });
  if (ticket) query.set("ticket", ticket);
  if (lastCursor) query.set("cursor", lastCursor);
  socket = new WebSocket(`${daemon}/terminals/${terminalId}?${query}`);
  socket.binaryType = "arraybuffer";
  socket.onmessage = (message) => {
    if (message.data instanceof ArrayBuffer) {
      term.write(new Uint8Array(message.data));
      return;
    }
    const control = JSON.parse(message.data);
    if (control.type === "cursor") {
      lastCursor = control.cursor;
    } else if (control.type === "ready") {
      lastCursor = control.cursor;
      status.textContent = "connected";
      document.body.dataset.ready = "true";
    } else if (control.type === "truncated") {
      term.write(`\r\n[${control.dropped_bytes} bytes of output were missed]\r\n`);
    } else if (control.type === "exit") {
      finished = true;
      status.textContent = `exited with ${control.code}`;
    } else if (control.type === "error") {
      status.textContent = `error: ${control.message}`;
    }
  };
  socket.onclose = () => {
    document.body.dataset.ready = "";
    if (!finished) {
      status.textContent = "reconnecting…";
      setTimeout(connect, 500);
    }
  };
}

term.onData((data) => socket?.readyState === WebSocket.OPEN && socket.send(encoder.encode(data)));
term.onResize(({ cols, rows }) => {
  if (socket?.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "resize", cols, rows }));
  }
});
window.addEventListener("resize", () => fit.fit());

// For tests and curious people: the terminal, and the screen as text.
window.term = term;
window.screenText = () => {
  const buffer = term.buffer.active;
  const lines = [];
  for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
  return lines.join("\n");
};

connect();
