// Dashboard settings kept in localStorage: the API token and the theme.

const TOKEN_KEY = 'tessera.token';
const THEME_KEY = 'tessera.theme';
export const DEFAULT_TOKEN = 'dashboard';

function load(key) {
  try {
    return window.localStorage.getItem(key);
  } catch {
    return null;  // storage disabled
  }
}

function save(key, value) {
  try {
    if (value == null) window.localStorage.removeItem(key);
    else window.localStorage.setItem(key, value);
  } catch {
    // storage disabled: the setting lasts for this page only
  }
}

export function getToken() {
  const t = load(TOKEN_KEY);
  return t == null || t === '' ? DEFAULT_TOKEN : t;
}

// True when the user entered a token (not the default).
export function hasStoredToken() {
  const t = load(TOKEN_KEY);
  return t != null && t !== '';
}

export function setToken(token) {
  save(TOKEN_KEY, token === '' ? null : token);
}

const systemDark = () => window.matchMedia?.('(prefers-color-scheme: dark)').matches;

// 'light' | 'dark': the stored choice, else the system's.
export function effectiveTheme() {
  const t = load(THEME_KEY);
  if (t === 'light' || t === 'dark') return t;
  return systemDark() ? 'dark' : 'light';
}

// Applies the theme to <html data-theme> and calls onChange(theme) whenever
// it changes later (toggle or system setting).
export function initTheme(onChange) {
  const apply = () => {
    const theme = effectiveTheme();
    if (document.documentElement.dataset.theme !== theme) {
      document.documentElement.dataset.theme = theme;
      onChange(theme);
    }
  };
  document.documentElement.dataset.theme = effectiveTheme();
  window.matchMedia?.('(prefers-color-scheme: dark)').addEventListener?.('change', apply);
  return {
    toggle() {
      save(THEME_KEY, effectiveTheme() === 'dark' ? 'light' : 'dark');
      apply();
    },
  };
}
