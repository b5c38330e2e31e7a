// Copy buttons: a button with data-copy="ID" copies the text of the element with that id
// (the SSH line, the root password shown once) and says so next to it. Without JavaScript
// or a clipboard the buttons stay hidden and the text is selectable as ever.
(function () {
  "use strict";
  if (!navigator.clipboard || !navigator.clipboard.writeText) {
    return;
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    var said = document.getElementById(button.getAttribute("data-copy") + "-copied");
    if (!source) {
      return;
    }
    button.hidden = false;
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(source.textContent.trim()).then(function () {
        if (said) {
          said.textContent = button.getAttribute("data-done");
        }
      });
    });
  });
})();
