// The sign-in page: paste a bearer token (a service account's, from `kubectl create token`,
// or any other the API server accepts). It is kept in this tab's session storage only.

import { ApiError, get, session, whoAmI } from './api.js';
import { errorBox, h, replace } from './dom.js';

const MESSAGE_KEY = 'capstan.loginMessage';

// Leave a message for the sign-in page (why the user was sent back to it).
export function setLoginMessage(text) {
  if (text) sessionStorage.setItem(MESSAGE_KEY, text);
  else sessionStorage.removeItem(MESSAGE_KEY);
}

export function renderLogin(root, { onSignedIn }) {
  // Kept until a sign-in succeeds, so a reload still says why the user is here.
  const pending = sessionStorage.getItem(MESSAGE_KEY);
  const message = h('div', { class: 'login-message', id: 'login-message' });
  if (pending) replace(message, errorBox(new ApiError(401, 'Unauthorized', pending)));
  const token = h('textarea', {
    id: 'token',
    name: 'token',
    rows: 5,
    placeholder: 'eyJhbGciOi…',
    spellcheck: 'false',
    autocomplete: 'off',
    required: true,
  });
  const button = h('button', { type: 'submit', class: 'primary', id: 'sign-in' }, 'Sign in');
  const form = h('form', {
    class: 'login-form',
    onsubmit: async (e) => {
      e.preventDefault();
      const t = token.value.trim().replace(/^bearer\s+/i, '');
      if (!t) {
        replace(message, errorBox(new Error('Paste a bearer token first.')));
        return;
      }
      button.disabled = true;
      replace(message, h('p', { class: 'muted' }, 'Checking the token…'));
      session.token = t;
      try {
        // Any authenticated user may read discovery: a 401 here means the token is not valid.
        await get('/api');
        session.user = await whoAmI();
        setLoginMessage('');
        replace(message);
        onSignedIn();
      } catch (err) {
        session.clear();
        replace(message, errorBox(err));
      } finally {
        button.disabled = false;
      }
    },
  },
  h('label', { for: 'token' }, 'Bearer token'),
  token,
  h('p', { class: 'hint' }, 'For example: ', h('code', {}, 'kubectl create token NAME -n NAMESPACE'),
    '. The token stays in this browser tab and is sent only to the API server, with every request.'),
  button);
  replace(root, h('div', { class: 'login' },
    h('div', { class: 'login-card' },
      h('h1', {}, h('img', { src: '/favicon.svg', alt: '', class: 'logo' }), 'capstan'),
      h('p', { class: 'muted' }, 'Sign in to the cluster'),
      message,
      form)));
  token.focus();
}
