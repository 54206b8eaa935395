-- Daily learning activity, per UTC calendar day with any activity:
-- answers given (by answer time), distinct learners and lessons answered, correct answers,
-- lessons started (by start date), certificates completed (by completion date).
WITH per_learner_lesson_day AS (
    -- narrows millions of answers to (day, learner, lesson) before the distinct counts
    SELECT
        CAST(timezone('UTC', answered_at) AS DATE) AS activity_date,
        user_id,
        lesson_id,
        count(*) AS answers,
        count(*) FILTER (WHERE is_correct) AS correct_answers
    FROM analytics.stg_answers
    WHERE answered_at IS NOT NULL
    GROUP BY 1, 2, 3
),
answers AS (
    SELECT
        activity_date,
        CAST(sum(answers) AS BIGINT) AS answers,
        CAST(sum(correct_answers) AS BIGINT) AS correct_answers,
        count(DISTINCT user_id) AS active_learners,
        count(DISTINCT lesson_id) AS lessons_answered
    FROM per_learner_lesson_day
    GROUP BY activity_date
),
starts AS (
    SELECT CAST(timezone('UTC', started_at) AS DATE) AS activity_date, count(*) AS lessons_started
    FROM analytics.stg_active_lessons
    WHERE started_at IS NOT NULL
    GROUP BY 1
),
certified AS (
    SELECT CAST(timezone('UTC', completed_at) AS DATE) AS activity_date, count(*) AS certificates_completed
    FROM analytics.stg_certificates
    WHERE completed_at IS NOT NULL
    GROUP BY 1
),
days AS (
    SELECT activity_date FROM answers
    UNION SELECT activity_date FROM starts
    UNION SELECT activity_date FROM certified
)
SELECT
    d.activity_date,
    coalesce(a.answers, 0) AS answers,
    coalesce(a.correct_answers, 0) AS correct_answers,
    coalesce(a.active_learners, 0) AS active_learners,
    coalesce(a.lessons_answered, 0) AS lessons_answered,
    coalesce(s.lessons_started, 0) AS lessons_started,
    coalesce(c.certificates_completed, 0) AS certificates_completed
FROM days AS d
LEFT JOIN answers AS a USING (activity_date)
LEFT JOIN starts AS s USING (activity_date)
LEFT JOIN certified AS c USING (activity_date)
ORDER BY d.activity_date
