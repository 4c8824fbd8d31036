// LogBuffer: the tail of one rank's log, assembled from pieces that carry
// their byte offset in the log file (stream `log` events, GET /logs answers).
// Pieces may repeat or overlap after a reconnect; each byte is shown once.
// Keeps at most maxBytes (roughly; counted in UTF-8 bytes) of the tail. Pure.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function utf8Length(s) {
  return encoder.encode(s).length;
}

export class LogBuffer {
  constructor(maxBytes = 256 * 1024) {
    this.maxBytes = maxBytes;
    this.text = '';
    this.start = 0;     // byte offset of the first byte held (or of the first gap)
    this.end = 0;       // byte offset just past the last byte held
    this.empty = true;
  }

  // Adds `data` found at byte `offset`. Returns true when the text changed.
  add(offset, data) {
    const off = Math.max(0, Number(offset) || 0);
    const bytes = encoder.encode(String(data ?? ''));
    if (!bytes.length) return false;
    const stop = off + bytes.length;
    if (!this.empty && stop <= this.end) return false;  // already held
    if (this.empty) {
      this.start = off;
      this.text = (off > 0 ? `[… ${off} earlier bytes not shown]\n` : '') + decoder.decode(bytes);
      this.empty = false;
    } else if (off > this.end) {
      this.text += `\n[… ${off - this.end} bytes not shown]\n` + decoder.decode(bytes);
    } else {
      this.text += decoder.decode(bytes.subarray(this.end - off));
    }
    this.end = stop;
    this.trim();
    return true;
  }

  trim() {
    if (this.text.length <= this.maxBytes * 1.25) return;
    const cut = this.text.length - this.maxBytes;
    const nl = this.text.indexOf('\n', cut);
    this.text = '[… older output dropped]\n' + this.text.slice(nl >= 0 ? nl + 1 : cut);
  }
}
