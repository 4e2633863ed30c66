// Plain JavaScript: untyped, so only valid as javascript.
function double(x) {
  return x * 2;
}

module.exports = { double };
