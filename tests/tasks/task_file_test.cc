#include "tasks/task_file.h"

#include <fstream>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TaskFileTest, YamlTasksOfEveryVerifierKind) {
  const std::string path = Write("tasks.yaml", R"(tasks:
  - id: sum-1
    prompt: What is the total of column b in data.csv?
    difficulty: 3
    files: [{path: data.csv, contents: "a,b\n1,2\n3,4\n"}]
    answer: 6
  - id: ratio-1
    prompt: What is 1/3 to six places?
    answer: "0.333333"
    verifier: {kind: exact, tolerance: 1.0e-6}
  - id: word-1
    prompt: Name a fruit.
    verifier: {kind: regex, pattern: "(apple|pear)s?"}
  - id: json-1
    prompt: Print seven as JSON.
    verifier: {kind: python, script: "import json, sys\nsys.exit(json.load(sys.stdin) != 7)\n"}
  - id: fix-1
    prompt: Make the tests pass.
    setup: ["git init -q"]
    verifier: {kind: tests, test_command: "python3 -m pytest -q", fail_to_pass: [test_a.py::test_new], pass_to_pass: [test_a.py::test_old],
               files: [{path: test_a.py, contents: "def test_new(): pass\n"}]}
)");
  auto tasks = LoadTaskFile(path);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 5u);
  const Task& sum = (*tasks)[0];
  EXPECT_EQ(sum.family, "file");
  EXPECT_EQ(sum.id, "sum-1");
  EXPECT_EQ(sum.difficulty, 3);
  ASSERT_EQ(sum.files.size(), 1u);
  EXPECT_EQ(sum.files[0].contents, "a,b\n1,2\n3,4\n");
  EXPECT_EQ(sum.answer, "6");
  EXPECT_EQ(sum.check.kind, "exact");
  EXPECT_FALSE(sum.check.tolerance.has_value());
  EXPECT_EQ((*tasks)[1].check.tolerance, 1e-6);
  EXPECT_EQ((*tasks)[2].check.pattern, "(apple|pear)s?");
  EXPECT_NE((*tasks)[3].check.script.find("json.load"), std::string::npos);
  const Task& fix = (*tasks)[4];
  EXPECT_EQ(fix.setup, (std::vector<std::string>{"git init -q"}));
  EXPECT_EQ(fix.check.test_command, "python3 -m pytest -q");
  EXPECT_EQ(fix.check.fail_to_pass, (std::vector<std::string>{"test_a.py::test_new"}));
  EXPECT_EQ(fix.check.pass_to_pass, (std::vector<std::string>{"test_a.py::test_old"}));
  ASSERT_EQ(fix.check.files.size(), 1u);
  EXPECT_EQ(fix.check.files[0].path, "test_a.py");
  EXPECT_EQ(fix.check.files[0].contents, "def test_new(): pass\n");
  EXPECT_TRUE(fix.files.empty()) << "the check's files are not the agent's";
}

TEST(TaskFileTest, AnEnvironmentOverTheJobsSandbox) {
  auto tasks = LoadTaskFile(Write("env.yaml", R"(tasks:
  - id: fetch-1
    prompt: p
    answer: "1"
    environment: {image: busybox, memory: 128M, pids: 32, cpus: 0.25, net: policy, allow: ["10.0.0.7:443"], disk: 256M}
  - id: plain-1
    prompt: p
    answer: "1"
)"));
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  const TaskEnvironment& env = (*tasks)[0].environment;
  EXPECT_EQ(env.image, "busybox");
  EXPECT_EQ(env.memory_bytes, 128ull << 20);
  EXPECT_EQ(env.pids, 32);
  EXPECT_EQ(env.cpus, 0.25);
  EXPECT_EQ(env.net, "policy");
  EXPECT_EQ(env.allow, (std::vector<std::string>{"10.0.0.7:443"}));
  EXPECT_EQ(env.disk_bytes, 256ull << 20);
  const TaskEnvironment& plain = (*tasks)[1].environment;
  EXPECT_TRUE(plain.image.empty());
  EXPECT_FALSE(plain.memory_bytes.has_value());
  EXPECT_FALSE(plain.disk_bytes.has_value());
  EXPECT_TRUE(plain.net.empty());
}

TEST(TaskFileTest, AnEnvironmentNamesWhoTheAgentRunsAs) {
  auto tasks = LoadTaskFile(Write("user.yaml", R"(tasks:
  - {id: a, prompt: p, answer: "1", environment: {user: nobody}}
  - {id: b, prompt: p, answer: "1", environment: {user: "1000:daemon"}}
  - {id: c, prompt: p, answer: "1", environment: {user: ":3456"}}
)"));
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  EXPECT_EQ((*tasks)[0].environment.user, "nobody");
  EXPECT_EQ((*tasks)[0].environment.group, "");
  EXPECT_EQ((*tasks)[1].environment.user, "1000");
  EXPECT_EQ((*tasks)[1].environment.group, "daemon");
  EXPECT_EQ((*tasks)[2].environment.user, "");
  EXPECT_EQ((*tasks)[2].environment.group, "3456");
  const std::string f = ::testing::TempDir() + "/user-bad.yaml";
  const auto error = [&](const std::string& user) {
    return LoadTaskFile(Write("user-bad.yaml", "tasks:\n  - {id: a, prompt: p, answer: '1', environment: {user: " + user +
                                                   "}}\n"))
        .status()
        .message();
  };
  EXPECT_EQ(error("'nobody:'"), f + ":2: tasks[0].environment.user: 'nobody:': expected USER[:GROUP] with a group after ':'");
  EXPECT_EQ(error("'a,b'"), f + ":2: tasks[0].environment.user: user 'a,b': a name or number may not contain ':', ',', a newline or NUL");
  EXPECT_EQ(error("''"), f + ":2: tasks[0].environment.user: expected USER[:GROUP] or :GROUP, got an empty string");
  EXPECT_EQ(error("[x]").rfind(f + ":2: tasks[0].environment.user: ", 0), 0u);
}

TEST(TaskFileTest, JsonLinesKeepTheirLineNumbers) {
  const std::string path = Write("tasks.jsonl",
                                 "{\"id\": \"a\", \"prompt\": \"p\", \"answer\": \"1\"}\n"
                                 "\n"
                                 "{\"id\": \"b\", \"prompt\": \"p\", \"verifier\": {\"kind\": \"regex\", \"pattern\": \"x+\"}}\n");
  auto tasks = LoadTaskFile(path);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[1].id, "b");
  const std::string bad = Write("bad.jsonl",
                                "{\"id\": \"a\", \"prompt\": \"p\", \"answer\": \"1\"}\n"
                                "\n"
                                "{\"id\": \"b\", \"prompt\": \"p\", \"verifier\": {\"kind\": \"vibes\"}}\n");
  const Status s = LoadTaskFile(bad).status();
  EXPECT_EQ(s.message().rfind(bad + ":3: [1].verifier.kind: ", 0), 0u) << s.message();
}

std::string ErrorOf(const std::string& task_yaml) {
  return LoadTaskFile(Write("one.yaml", "tasks:\n" + task_yaml)).status().message();
}

TEST(TaskFileTest, ErrorsNameFileLineAndField) {
  const std::string f = ::testing::TempDir() + "/one.yaml";
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p}\n"), f + ":2: tasks[0].answer: required by the exact verifier");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, verifier: {kind: exact, files: [{path: t, contents: c}]}}\n"),
            f + ":2: tasks[0].verifier.files: only the python and tests verifiers run with files of their own");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: python, script: s, files: [{path: /etc/x, contents: c}]}}\n")
                .rfind(f + ":2: tasks[0].verifier.files[0].path: ", 0),
            0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, files: [{path: ../x, contents: y}]}\n").rfind(f + ":2: tasks[0].files[0].path: ", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, files: [{path: /etc/passwd, contents: y}]}\n").rfind(f + ":2: tasks[0].files[0].path: ", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, answer_file: ../../out}\n").rfind(f + ":2: tasks[0].answer_file: ", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: regex}}\n"), f + ":2: tasks[0].verifier.pattern: required by the regex verifier");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: regex, pattern: '([a'}}\n").rfind(f + ":2: tasks[0].verifier.pattern: not a valid ECMAScript regex", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: python}}\n"), f + ":2: tasks[0].verifier.script: required by the python verifier");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: tests, fail_to_pass: [t]}}\n"), f + ":2: tasks[0].verifier.test_command: required by the tests verifier");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: tests, test_command: t}}\n").rfind(f + ":2: tasks[0].verifier.fail_to_pass: ", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, verifier: {kind: regex, pattern: x, tolerance: 0.1}}\n"), f + ":2: tasks[0].verifier.tolerance: only the exact verifier takes a tolerance");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1}\n  - {id: a, prompt: q, answer: 2}\n"), f + ":3: tasks[1].id: duplicate id 'a'");
  EXPECT_EQ(ErrorOf("  - {id: '', prompt: p, answer: 1}\n"), f + ":2: tasks[0].id: must not be empty");
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, difficulty: 11}\n").rfind(f + ":2: tasks[0].difficulty: value 11 out of range", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, image: /}\n").rfind(f + ":2: tasks[0].image: unknown key", 0), 0u);
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, environment: {image: /}}\n").rfind(f + ":2: tasks[0].environment.image: ", 0), 0u)
      << "an image is a built-in name, never a host path";
  EXPECT_EQ(ErrorOf("  - {id: a, prompt: p, answer: 1, environment: {allow: ['1.2.3.4:80']}}\n"),
            f + ":2: tasks[0].environment.allow: needs environment.net: policy");
  EXPECT_EQ(LoadTaskFile("/nonexistent/tasks.yaml").status().code(), Code::kNotFound);
  EXPECT_EQ(LoadTaskFile(Write("empty.yaml", "tasks: []\n")).status().message().rfind(::testing::TempDir() + "/empty.yaml:1: tasks: expected at least 1", 0), 0u);
}

}  // namespace
}  // namespace flashroll
