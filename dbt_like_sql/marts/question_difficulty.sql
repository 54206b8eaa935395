-- Question difficulty: per question (of a lesson's entry or exit quiz), how often learners get it right on
-- their first attempt. A learner's first attempt at a question is their answer with the lowest attempt_index.
-- first_attempt_correct_rate = correct / decided first answers (undecided answers, pending review, left out).
-- The title comes from the catalogue when the question is found there, else from the latest answer.
with

-- read twice below: NOT MATERIALIZED keeps DuckDB from copying every answer into a temporary result first,
-- which it does for a CTE referenced more than once (scale large, 9.7M answers: the model 7.4-9.2 -> 6.2-7.3 s)
answers as not materialized (

    select * from {{ ref('stg_answers') }}

),

lesson_questions as (

    select * from {{ ref('stg_lesson_questions') }}

),

-- one row per learner (progress record) and question: the first attempt's verdict, as a hash aggregate
-- (attempt_index is unique per record, quiz and question: the key of the answer). A record belongs to one lesson,
-- so grouping by lesson_id too makes the same groups; it is in the key rather than carried by any_value(), which
-- copies a string into every group's state (millions of groups at scale large). The latest title is taken per
-- question below, not per record (the latest answer of a question is the latest of its records' latest
-- answers: the same title, fewer strings carried through the big aggregate).
first_attempts as (

    select
        lesson_id,
        quiz_type,
        question_id,
        arg_min({ 'is_correct': is_correct }, attempt_index).is_correct as first_is_correct,
        count(*) as answers

    from answers

    group by active_lesson_id, lesson_id, quiz_type, question_id

),

first_attempts_per_question as (

    select
        lesson_id,
        quiz_type,
        question_id,
        count(*) as first_attempts,
        count(first_is_correct) as first_attempts_decided,
        count(*) filter (where first_is_correct) as first_attempts_correct,
        sum(answers) as answers_all_attempts

    from first_attempts

    group by lesson_id, quiz_type, question_id

),

answered_titles as (

    select
        lesson_id,
        quiz_type,
        question_id,
        arg_max(question_title, answered_at) as answered_title

    from answers

    group by lesson_id, quiz_type, question_id

),

catalogue as (

    select
        lesson_id,
        quiz_type,
        question_id,
        min(question_title) as question_title,
        min(question_type) as question_type

    from lesson_questions

    where question_id is not null

    group by lesson_id, quiz_type, question_id

),

final as (

    select
        first_attempts_per_question.lesson_id,
        first_attempts_per_question.quiz_type,
        first_attempts_per_question.question_id,
        coalesce(catalogue.question_title, answered_titles.answered_title) as question_title,
        catalogue.question_type,
        first_attempts_per_question.first_attempts,
        first_attempts_per_question.first_attempts_decided,
        first_attempts_per_question.first_attempts_correct,
        {{ rate(
            'first_attempts_per_question.first_attempts_correct',
            'first_attempts_per_question.first_attempts_decided',
        ) }} as first_attempt_correct_rate,
        cast(first_attempts_per_question.answers_all_attempts as bigint) as answers_all_attempts

    from first_attempts_per_question

    left join catalogue using (lesson_id, quiz_type, question_id)

    left join answered_titles using (lesson_id, quiz_type, question_id)

)

select * from final
