// The SQS endpoint behind SigV4, through the AWS SDK for JavaScript v3 signing with a
// credential the node issued: served with it, refused with a wrong secret, and served
// from a machine whose clock is 20 minutes ahead once the SDK has set its clock by the
// answer's Date header. Prints what it saw as JSON.
import {
  CreateQueueCommand,
  ListQueuesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";

const [endpoint, name, accessKeyId, secretAccessKey] = process.argv.slice(2);
const client = (secret, extra = {}) =>
  new SQSClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId, secretAccessKey: secret },
    maxAttempts: 3,
    ...extra,
  });

const seen = {};
const good = client(secretAccessKey);
const { QueueUrl } = await good.send(new CreateQueueCommand({ QueueName: name }));
seen.queueUrl = QueueUrl;
await good.send(new SendMessageCommand({ QueueUrl, MessageBody: "signed in JavaScript" }));
const got = await good.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
seen.bodies = (got.Messages ?? []).map((m) => m.Body);

try {
  await client("x".repeat(40)).send(new ListQueuesCommand({}));
  seen.wrongSecret = "served";
} catch (error) {
  seen.wrongSecret = { name: error.name, status: error.$metadata?.httpStatusCode, message: error.message };
}

const realNow = Date.now;
Date.now = () => realNow() + 20 * 60 * 1000; // this machine's clock, 20 minutes ahead
const ahead = client(secretAccessKey);
const listed = await ahead.send(new ListQueuesCommand({ QueueNamePrefix: name }));
seen.skewedListed = listed.QueueUrls ?? [];
seen.skewedAttempts = listed.$metadata.attempts;
seen.offsetAfter = ahead.config.systemClockOffset; // about -20 minutes: set by Date
console.log(JSON.stringify(seen));
