// Renders ReDoc on /api/v1/redoc from the files shipped with gpulease (no CDN).
window.addEventListener("load", function () {
  Redoc.init("/api/v1/openapi.json", {}, document.getElementById("redoc"));
});
