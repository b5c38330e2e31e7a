// The delivery page follows its instance's server-sent events and reloads as soon as the
// instance changed (a stage, a node, the status). The page's own 5 s refresh stays as the
// floor: without EventSource or JavaScript, or if a proxy holds the stream back.
(function () {
  "use strict";
  var page = document.querySelector("[data-follow]");
  if (!page || !window.EventSource) {
    return;
  }
  var status = page.getAttribute("data-status");
  var stages = Number(page.getAttribute("data-stages"));
  var source = new EventSource(page.getAttribute("data-follow"));
  // The user leaving for another page wins: a reload now would cancel their navigation.
  var leaving = false;
  window.addEventListener("beforeunload", function () {
    leaving = true;
    source.close();
  });
  function reload() {
    if (!leaving) {
      window.location.reload();
    }
  }
  source.addEventListener("instance", function (event) {
    var seen = JSON.parse(event.data);
    if (seen.status !== status || seen.stages.length !== stages) {
      source.close();
      reload();
    }
  });
  source.addEventListener("end", function () {
    source.close();
  });
  source.onerror = function () {
    // the stream broke (a restart, a proxy): look again in a moment
    source.close();
    window.setTimeout(reload, 3000);
  };
}());
