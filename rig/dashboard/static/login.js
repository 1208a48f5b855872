"use strict";
// The dashboard's own token (never the broker's password) for a session cookie.
document.getElementById("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const error = document.getElementById("login-error");
  error.textContent = "";
  const resp = await fetch("/login", {
    method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({token: document.getElementById("token").value}),
  });
  if (resp.ok) { window.location.href = "/"; } else { error.textContent = "wrong token"; }
});
