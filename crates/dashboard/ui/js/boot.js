// Loads the app's modules. Browsers abort the requests in flight when the machine's network
// changes (as it does whenever a pod's interface comes up on this host); a module that fails
// to load that way leaves the page blank, so the page is loaded again — a few times at most.

const RETRIES_KEY = 'capstan.boot-retries';
const MAX_RETRIES = 3;

const app = document.createElement('script');
app.type = 'module';
app.src = '/js/app.js';
app.addEventListener('load', () => sessionStorage.removeItem(RETRIES_KEY));
app.addEventListener('error', () => {
  const tried = Number(sessionStorage.getItem(RETRIES_KEY) || 0);
  const boot = document.querySelector('.boot');
  if (tried < MAX_RETRIES) {
    sessionStorage.setItem(RETRIES_KEY, String(tried + 1));
    if (boot) boot.textContent = 'Loading the dashboard (trying again)…';
    setTimeout(() => window.location.reload(), 500 * (tried + 1));
  } else {
    sessionStorage.removeItem(RETRIES_KEY);
    if (boot) boot.textContent = 'The dashboard could not be loaded: reload the page to try again.';
  }
});
document.head.appendChild(app);
