-- Question difficulty: per question (of a lesson's entry or exit quiz), how often learners get it right on
-- their first attempt. A learner's first attempt at a question is their answer with the lowest attempt_index.
-- first_attempt_correct_rate = correct / decided first answers (undecided answers, pending review, left out).
-- The title comes from the catalogue when the question is found there, else from the latest answer.
WITH first_answers AS (
    SELECT *
    FROM analytics.stg_answers
    QUALIFY attempt_index = min(attempt_index) OVER (PARTITION BY active_lesson_id, quiz_type, question_id)
),
per_question AS (
    SELECT
        lesson_id,
        quiz_type,
        question_id,
        arg_max(question_title, answered_at) AS answered_title,
        count(*) AS first_attempts,
        count(is_correct) AS first_attempts_decided,
        count(*) FILTER (WHERE is_correct) AS first_attempts_correct
    FROM first_answers
    GROUP BY lesson_id, quiz_type, question_id
),
all_answers AS (
    SELECT lesson_id, quiz_type, question_id, count(*) AS answers
    FROM analytics.stg_answers
    GROUP BY lesson_id, quiz_type, question_id
),
catalogue AS (
    SELECT lesson_id, quiz_type, question_id, min(question_title) AS question_title, min(question_type) AS question_type
    FROM analytics.stg_lesson_questions
    WHERE question_id IS NOT NULL
    GROUP BY lesson_id, quiz_type, question_id
)
SELECT
    p.lesson_id,
    p.quiz_type,
    p.question_id,
    coalesce(c.question_title, p.answered_title) AS question_title,
    c.question_type,
    p.first_attempts,
    p.first_attempts_decided,
    p.first_attempts_correct,
    p.first_attempts_correct / nullif(p.first_attempts_decided, 0) AS first_attempt_correct_rate,
    a.answers AS answers_all_attempts
FROM per_question AS p
JOIN all_answers AS a USING (lesson_id, quiz_type, question_id)
LEFT JOIN catalogue AS c USING (lesson_id, quiz_type, question_id)
