// What the node checks share: each check prints one JSON line ({check, ok, detail} or
// {check, ok, error}); exitStatus() is 0 only when every check passed.
let failed = 0;

export function report(name, ok, detail) {
  if (!ok) failed += 1;
  console.log(JSON.stringify(ok ? { check: name, ok, detail } : { check: name, ok, error: detail }));
}

export async function check(name, fn) {
  try {
    report(name, true, await fn());
  } catch (e) {
    report(name, false, String(e && e.stack || e));
  }
}

export function expect(cond, what) {
  if (!cond) throw new Error(what);
}

export function exitStatus() { return failed === 0 ? 0 : 1; }
