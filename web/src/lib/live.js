// LiveSource: one page's live data. It follows the page's Server-Sent Events
// stream; when the stream is refused (HTTP 503 when the coordinator's stream
// limit is reached, or any non-event-stream answer) or keeps failing, it falls
// back to calling the page's `poll` (its GET endpoints) every 5 s, and tries
// the stream again every minute.
//
// Handlers must accept repeated data: after a reconnect a stream starts over
// with the current state.
//
// A 401 from `poll` (the coordinator wants a user token; the stream was
// refused the same way) stops everything with status 'signin': the page is
// mounted again once the user has signed in.

export const POLL_MS = 5000;
const RETRY_STREAM_MS = 60000;
const MAX_STREAM_ERRORS = 3;

export class LiveSource {
  // url: the stream; events: {eventName: handler(json)}; poll: async () => void;
  // onStatus(status, detail): 'connecting' | 'live' | 'reconnecting' |
  // 'polling' | 'offline' | 'signin' | 'ended'; done(): true once nothing more can come
  // (a finished job), so a closed stream is not reopened.
  constructor({ url, events, poll, onStatus = () => {}, done = () => false }) {
    this.url = url;
    this.events = events;
    this.poll = poll;
    this.onStatus = onStatus;
    this.done = done;
    this.source = null;
    this.timer = null;
    this.stopped = false;
    this.errors = 0;
    this.mode = 'idle';
  }

  start() {
    this.openStream();
    return this;
  }

  stop() {
    this.stopped = true;
    this.closeStream();
    clearTimeout(this.timer);
    this.timer = null;
  }

  status(s, detail = '') {
    this.mode = s;
    if (!this.stopped) this.onStatus(s, detail);
  }

  openStream() {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = null;
    this.errors = 0;
    this.status('connecting');
    let source;
    try {
      source = new EventSource(this.url);
    } catch (e) {
      this.startPolling(String(e));
      return;
    }
    this.source = source;
    source.onopen = () => this.status('live');
    for (const [name, handler] of Object.entries(this.events)) {
      source.addEventListener(name, (event) => {
        if (this.stopped || this.source !== source) return;
        this.errors = 0;
        let data;
        try {
          data = JSON.parse(event.data);
        } catch (e) {
          console.warn(`stream ${this.url}: event ${name} is not JSON`, e);
          return;
        }
        handler(data);
      });
    }
    source.onerror = () => {
      if (this.stopped || this.source !== source) return;
      if (this.done()) {
        // The server ends a finished job's stream once everything is sent.
        this.closeStream();
        this.status('ended');
        return;
      }
      this.errors++;
      if (source.readyState === EventSource.CLOSED || this.errors >= MAX_STREAM_ERRORS) {
        this.closeStream();
        this.startPolling('stream unavailable');
      } else {
        this.status('reconnecting');
      }
    };
  }

  closeStream() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  startPolling(reason) {
    if (this.stopped) return;
    const retryAt = Date.now() + RETRY_STREAM_MS;
    const tick = async () => {
      if (this.stopped) return;
      try {
        await this.poll();
        this.status('polling', reason);
      } catch (e) {
        if (e && e.status === 401) {
          this.status('signin', String(e.message || e));
          return;
        }
        this.status('offline', String(e.message || e));
      }
      if (this.stopped) return;
      if (this.done()) {
        this.status('ended');
        return;
      }
      if (Date.now() >= retryAt) {
        this.openStream();
        return;
      }
      this.timer = setTimeout(tick, POLL_MS);
    };
    this.status('polling', reason);
    tick();
  }
}
