-- Question difficulty: per question (of a lesson's entry or exit quiz), how often learners get it right on
-- their first attempt. A learner's first attempt at a question is their answer with the lowest attempt_index.
-- first_attempt_correct_rate = correct / decided first answers (undecided answers, pending review, left out).
-- The title comes from the catalogue when the question is found there, else from the latest answer.
WITH per_learner AS (
    -- one row per learner (progress record) and question: the first attempt's verdict, as a hash aggregate
    -- (attempt_index is unique per record, quiz and question: the key of the answer)
    SELECT
        lesson_id,
        quiz_type,
        question_id,
        arg_min({'is_correct': is_correct}, attempt_index).is_correct AS first_is_correct,
        count(*) AS answers,
        arg_max(question_title, answered_at) AS latest_title,
        max(answered_at) AS latest_at
    FROM analytics.stg_answers
    GROUP BY active_lesson_id, lesson_id, quiz_type, question_id
),
per_question AS (
    SELECT
        lesson_id,
        quiz_type,
        question_id,
        arg_max(latest_title, latest_at) AS answered_title,
        count(*) AS first_attempts,
        count(first_is_correct) AS first_attempts_decided,
        count(*) FILTER (WHERE first_is_correct) AS first_attempts_correct,
        sum(answers) AS answers_all_attempts
    FROM per_learner
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
    CAST(p.answers_all_attempts AS BIGINT) AS answers_all_attempts
FROM per_question AS p
LEFT JOIN catalogue AS c USING (lesson_id, quiz_type, question_id)
