-- Learner progress per lesson: one row per learner and lesson the learner has a progress record for.
-- attempts and best_score come from the exit quiz: an attempt is one attempt_index with at least one
-- exit-quiz answer; its score is the percentage of its decided answers that are correct (undecided,
-- i.e. pending review, are left out); best_score is the best attempt's score.
WITH exit_attempts AS (
    SELECT
        user_id,
        lesson_id,
        attempt_index,
        count(*) AS answers,
        count(is_correct) AS decided,
        count(*) FILTER (WHERE is_correct) AS correct
    FROM analytics.stg_answers
    WHERE quiz_type = 'exit'
    GROUP BY user_id, lesson_id, attempt_index
),
per_learner_lesson AS (
    SELECT
        user_id,
        lesson_id,
        count(*) AS attempts,
        CAST(sum(answers) AS BIGINT) AS exit_answers,
        max(100.0 * correct / nullif(decided, 0)) AS best_score
    FROM exit_attempts
    GROUP BY user_id, lesson_id
)
SELECT
    al.user_id,
    al.lesson_id,
    coalesce(l.lesson_title, al.lesson_title) AS lesson_title,
    al.status,
    al.progress_percent,
    al.score,
    a.best_score,
    coalesce(a.attempts, 0) AS attempts,
    coalesce(a.exit_answers, 0) AS exit_answers,
    al.time_spent,
    al.started_at,
    al.last_activity_at
FROM analytics.stg_active_lessons AS al
LEFT JOIN per_learner_lesson AS a ON a.user_id = al.user_id AND a.lesson_id = al.lesson_id
LEFT JOIN analytics.stg_lessons AS l ON l.lesson_id = al.lesson_id
