/* test_judge.c - the judge model's question and how its answers become decisions. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "api/judge.h"

static struct kernel_judge_request req(double threshold, enum policy_decision fallback)
{
    struct kernel_judge_request q = {.agent = "coder", .kind = "tool_call", .target = "bash",
                                     .instructions = "a throwaway container", .threshold = threshold,
                                     .fallback = fallback};
    q.args = json_pack("{s:s}", "command", "ls");
    return q;
}

static char *chat(const char *content)
{
    json_t *r = json_pack("{s:[{s:{s:s, s:s}}]}", "choices", "message", "role", "assistant", "content", content);
    char *t = json_dumps(r, 0);
    json_decref(r);
    return t;
}

static enum policy_decision verdict(const struct kernel_judge_request *q, long status, const char *content,
                                    char *reason, size_t n)
{
    char *body = content ? chat(content) : strdup("not json");
    enum policy_decision d = judge_verdict(q, status, status ? NULL : "connection refused", body, reason, n);
    free(body);
    return d;
}

Test(judge, the_question_carries_the_call_and_instructions)
{
    struct kernel_judge_request q = req(0.6, POLICY_REQUIRE_APPROVAL);
    size_t len;
    char *body = judge_request_body("jev", &q, &len);
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b);
    cr_assert_str_eq(json_string_value(json_object_get(b, "model")), "jev");
    json_t *msgs = json_object_get(b, "messages");
    cr_assert(strstr(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "throwaway container"));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                     "{\"agent_id\":\"coder\",\"arguments\":{\"command\":\"ls\"},\"kind\":\"tool_call\",\"tool\":\"bash\"}");
    cr_assert_eq(len, strlen(body));
    json_decref(b);
    free(body);
    json_decref(q.args);
}

Test(judge, the_top_choice_stands_at_the_threshold)
{
    struct kernel_judge_request q = req(0.6, POLICY_REQUIRE_APPROVAL);
    char why[300];
    cr_assert_eq(verdict(&q, 200, "{\"allow\": 0.6, \"deny\": 0.1, \"require_approval\": 0.3}", why, sizeof why),
                 POLICY_ALLOW);
    cr_assert_str_eq(why, "judge: allow 0.60");
    cr_assert_eq(verdict(&q, 200, "Sure!\n```json\n{\"deny\": 0.9, \"allow\": 0.05}\n```", why, sizeof why),
                 POLICY_DENY);
    cr_assert_str_eq(why, "judge: deny 0.90");
    json_decref(q.args);
}

Test(judge, below_threshold_or_no_answer_is_the_fallback)
{
    struct kernel_judge_request q = req(0.8, POLICY_DENY);
    char why[300];
    cr_assert_eq(verdict(&q, 200, "{\"allow\": 0.7, \"deny\": 0.3}", why, sizeof why), POLICY_DENY);
    cr_assert_str_eq(why, "judge: allow 0.70 below threshold 0.80; deny");
    cr_assert_eq(verdict(&q, 200, "I cannot decide", why, sizeof why), POLICY_DENY);
    cr_assert(strstr(why, "no probabilities"));
    cr_assert_eq(verdict(&q, 200, NULL, why, sizeof why), POLICY_DENY);
    cr_assert_eq(verdict(&q, 503, "{\"allow\": 1}", why, sizeof why), POLICY_DENY);
    cr_assert(strstr(why, "HTTP 503"));
    cr_assert_eq(verdict(&q, 0, NULL, why, sizeof why), POLICY_DENY);
    cr_assert(strstr(why, "connection refused"));
    cr_assert_eq(verdict(&q, 200, "{\"allow\": \"0.99\"}", why, sizeof why), POLICY_DENY); /* not a number */
    json_decref(q.args);
}
