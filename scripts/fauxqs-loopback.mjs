// Starts fauxqs's SQS-compatible server on the loopback interface only
// (its own CLI listens on every interface). Used by scripts/stack.sh.
//   FAUXQS_APP  file URL of fauxqs's dist/app.js
//   FAUXQS_PORT port to listen on
import { pathToFileURL } from "node:url";

const { buildApp } = await import(pathToFileURL(process.env.FAUXQS_APP).href);
const app = buildApp({ logger: false });
const port = Number(process.env.FAUXQS_PORT);
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on 127.0.0.1:${port}`);
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => app.close().then(() => process.exit(0)));
}
