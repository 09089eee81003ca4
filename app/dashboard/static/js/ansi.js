// Terminal output as safe text: SGR colour codes become CSS classes from a fixed list, every other escape
// sequence and control character is dropped, and a carriage return keeps only what a terminal would show
// last (progress bars redraw with \r). Bidirectional-text controls (U+202A-E, U+2066-9, U+200E/F, U+061C)
// are shown as visible escapes such as \u202e, so a line is never displayed reordered.

const ESCAPE = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const COLOURS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];

// The text with every bidirectional control replaced by its escape (\u202e), shown as plain characters.
export function neutraliseBidi(text) {
  return text.replace(BIDI, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function lastRedraw(text) {
  if (!text.includes("\r")) return text;
  const parts = text.split("\r").filter((part) => part.length > 0);
  return parts.length ? parts[parts.length - 1] : "";
}

function applySgr(style, params) {
  const codes = params === "" ? [0] : params.split(";").map((code) => Number(code) || 0);
  for (const code of codes) {
    if (code === 0) {
      style.fg = null;
      style.bold = false;
    } else if (code === 1) style.bold = true;
    else if (code === 22) style.bold = false;
    else if (code === 39) style.fg = null;
    else if (code >= 30 && code <= 37) style.fg = COLOURS[code - 30];
    else if (code >= 90 && code <= 97) style.fg = `bright-${COLOURS[code - 90]}`;
  }
}

function classesOf(style) {
  const classes = [];
  if (style.fg) classes.push(`ansi-${style.fg}`);
  if (style.bold) classes.push("ansi-bold");
  return classes.join(" ");
}

// [{text, className}] for one log line; className is "" for plain text.
export function ansiSegments(raw) {
  const text = lastRedraw(String(raw));
  const style = { fg: null, bold: false };
  const segments = [];
  let last = 0;
  const push = (piece) => {
    const clean = neutraliseBidi(piece.replace(CONTROL, ""));
    if (clean) segments.push({ text: clean, className: classesOf(style) });
  };
  for (const match of text.matchAll(ESCAPE)) {
    push(text.slice(last, match.index));
    if (match[2] === "m") applySgr(style, match[1]);
    last = match.index + match[0].length;
  }
  push(text.slice(last));
  return segments;
}
